"""turbogate.results."""
