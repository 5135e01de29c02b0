"""turbogate.store."""
