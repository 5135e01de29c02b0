"""turbogate.gateway."""
