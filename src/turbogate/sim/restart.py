"""A gateway restarted inside a simulated run.

At ``stop_at`` the core's process dies: what it held ends (the engines abort its requests, their
clients get a 502) and arrivals are refused for ``down_s``, while the gateway hears nothing.  Then
a new ``Flow`` serves: it scrapes every replica once and takes what the old one left in the shared
store, as ``gateway/app.py`` starts.  The store's part is injected (``hand_over`` is what the old
process wrote, ``take_over`` what the new one reads), so the simulator does not depend on the
gateway.  The new core is a real ``Flow`` swapped in, not a stand-in: the simulator's loop is
compiled (setup.py), and its ``flow`` is typed.
"""

from __future__ import annotations

from collections.abc import Callable

from turbogate.sched.flow import Flow
from turbogate.sim.core import Simulation


def restart_gateway(sim: Simulation, stop_at: float, down_s: float, *,
                    hand_over: Callable[[Flow], object], take_over: Callable[[Flow], object]) -> None:
    """Stop ``sim``'s gateway at ``stop_at`` and start a new one ``down_s`` later."""
    sim.keep_calls()

    def stop(now: float) -> None:
        hand_over(sim.flow)
        sim.drop_all(now, "HTTP 502: the gateway stopped")
        sim.flow = Flow(sim.flow.policy)  # empty until it starts: the old one's queue is gone with it
        sim.down_until = now + down_s

    def start(now: float) -> None:
        core = sim.flow
        sim.take_over(core, now)
        take_over(core)
        sim.act(core.tick(now), now)

    sim.at(stop_at, stop)
    sim.at(stop_at + down_s, start)
