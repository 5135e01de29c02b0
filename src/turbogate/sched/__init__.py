"""turbogate.sched."""
