"""A pool's dispatch-to-completion time, as L1 measures it and as a process that starts cold takes
it from the store (pure).

The estimate sizes Turbo's headroom (sched/headroom.py), its coming occupancy
(sched/surge.py ``turbo_deficit``), Turbo's supply (sched/turbo_supply.py) and every predicted
wait.  Until it exists the holdback keeps no room for Turbo, so a gateway restarted, or a process
added, during an overload meets the overload's first seconds with the whole pool open to the
lower tiers: Turbo then waits for completions (a 2× overload's first counted window 5–10× its
unloaded TTFT in simulation, about twice the overload's own level).  What another process
measured on the same engines is the better first guess: ``adopt`` takes it while this process has
measured none of its own, and its own samples then move the estimate as usual.
"""

from __future__ import annotations

#: Weight of one sample in the estimate once it has a first one.
SERVICE_ALPHA = 0.2


class ServiceTime:
    """EWMA of dispatch-to-completion time, trusted once ``min_samples`` have completed (or once
    taken from another process: ``adopt``)."""

    __slots__ = ("min_samples", "samples", "value")

    def __init__(self, min_samples: int = 5) -> None:
        self.value = 0.0
        self.samples = 0
        self.min_samples = min_samples

    @property
    def estimate_s(self) -> float | None:
        return self.value if self.samples >= self.min_samples else None

    def add(self, sample: float) -> None:
        self.samples += 1
        self.value += (SERVICE_ALPHA if self.samples > 1 else 1.0) * (sample - self.value)

    def adopt(self, value: float) -> bool:
        """Take ``value`` (another process's estimate) while this one trusts none of its own (the
        few samples it may have are fewer than it trusts); True if taken."""
        if self.samples >= self.min_samples or value <= 0.0:
            return False
        self.value = value
        self.samples = self.min_samples
        return True
