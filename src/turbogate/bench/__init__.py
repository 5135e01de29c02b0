"""turbogate.bench."""
