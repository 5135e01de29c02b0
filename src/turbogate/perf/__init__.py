"""turbogate.perf."""
