"""``turbogate sim``: the fleet simulator (virtual time over sched/ + engine/)."""

from __future__ import annotations

from turbogate.notlanded import not_landed


def sim() -> None:
    """Simulate a fleet bigger than one machine with the gateway's own scheduling code."""
    not_landed("sim", "the discrete-event simulator")
