"""turbogate.sim."""
