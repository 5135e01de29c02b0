"""turbogate.plan."""
