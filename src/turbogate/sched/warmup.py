"""Warm-up: one small request to a replica when it joins the fleet or comes back after an
ejection, so its first real request does not pay for a cold engine (CUDA graphs captured
lazily, an empty prefix cache, a model still paging in).  Pure: the flow emits ``WarmUp`` and
the driver sends it (gateway/warmup.py: a one-token completion of the pool's first model; the
simulator ignores it), then reports the result with ``Flow.warmed``.

What the result means is decided here: a good answer proves the engine answers requests (more
than ``/health`` does), so it clears the replica's probation and strikes, and Turbo may use it
again at once; a failed one is a soft failure against it.
"""

from __future__ import annotations

from typing import NamedTuple

from turbogate.sched.picker import Picker
from turbogate.sched.replica import Health, Replica


class WarmUp(NamedTuple):
    """Send a warm-up request for ``model`` to ``replica``."""

    replica: Replica
    model: str


def warm_result(picker: Picker, replica: Replica, ok: bool, now: float) -> None:
    """Apply a warm-up's outcome to ``replica`` (see the module docstring)."""
    if replica.health is not Health.HEALTHY:
        return  # ejected meanwhile: its probes decide
    if ok:
        replica.failures = 0
        replica.probation = False
    else:
        picker.on_failure(replica, now, hard=False, dispatched=False, reason="warm-up request failed")
