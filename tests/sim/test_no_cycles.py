"""The simulator frees each request by reference counting: sim/run.py lets the cyclic GC run
only rarely during the loop, so a request left in a reference cycle would cost memory for the
whole run (as the flow request ↔ admission ticket pair once did)."""

from __future__ import annotations

import gc
from collections import Counter
from typing import Any

import pytest

from tests.sim.helpers import sim_config
from turbogate.sched.actions import FlowRequest
from turbogate.sched.admission import Ticket
from turbogate.sim.build import SimConfig
from turbogate.sim.core import Call
from turbogate.sim.run import simulate

_PER_REQUEST = (FlowRequest, Ticket, Call)


def _left_in_cycles(sc: SimConfig) -> tuple[int, Counter[str]]:
    """Records of a run, and the per-request objects that only the cyclic GC would free."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage
    try:
        n = len(simulate(sc).records)
        gc.collect()
        kinds = Counter(type(o).__name__ for o in gc.garbage if isinstance(o, _PER_REQUEST))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return n, kinds


CASES: dict[str, dict[str, Any]] = {
    "turbogate": {"qps": 3.0},
    "fifo": {"qps": 3.0, "policy": "fifo"},
    "round-robin": {"qps": 3.0, "policy": "round-robin"},
    "overload": {"qps": 12.0},  # queue timeouts and sheds
    "outage": {"qps": 3.0, "fleet_extra": {"failures": [{"replica": "p/1", "down_at_s": 6.0, "up_at_s": 12.0}]}},
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_request_is_left_in_a_reference_cycle(case: str) -> None:
    n, kinds = _left_in_cycles(sim_config(duration=40.0, **CASES[case]))
    assert n > 80
    # Only the few requests the finished simulation itself still holds may remain (a timer not yet popped).
    assert max(kinds.values(), default=0) <= n // 10, kinds
