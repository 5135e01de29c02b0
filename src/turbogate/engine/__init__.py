"""turbogate.engine."""
