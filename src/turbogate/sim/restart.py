"""A gateway restarted inside a simulated run.

At ``stop_at`` the core's process dies: what it held ends (the engines abort its requests, their
clients get a 502), and arrivals are refused for ``down_s``.  Then a new ``Flow`` serves: it
scrapes every replica once and takes what the old one left in the shared store, as
``gateway/app.py`` starts.  The store's part is injected (``hand_over`` is what the old process
wrote, ``take_over`` what the new one reads), so the simulator does not depend on the gateway.

The run's loop reads its core through this object (``Simulation.flow``), so it follows the swap;
while the gateway is down every event is answered with nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from turbogate.sched.actions import FlowRequest, Respond
from turbogate.sched.flow import Flow
from turbogate.sim.core import Call, Simulation


class GatewayRestart:
    """Stand in for ``sim``'s core, stop it at ``stop_at`` and start a new one ``down_s`` later."""

    def __init__(self, sim: Simulation, stop_at: float, down_s: float, *,
                 hand_over: Callable[[Flow], object], take_over: Callable[[Flow], object]) -> None:
        self.sim = sim
        self.core: Flow | None = sim.flow
        self.policy = sim.flow.policy
        self.calls: list[Call] = []
        self.hand_over = hand_over
        self.take_over = take_over
        sim.flow = self  # type: ignore[assignment]
        sim.at(stop_at, self._stop)
        sim.at(stop_at + down_s, self._start)

    def __getattr__(self, name: str) -> Any:
        core = self.__dict__["core"]
        return _nothing if core is None else getattr(core, name)

    def open(self, **kw: Any) -> FlowRequest | Respond:
        if self.core is None:
            return Respond(None, 502, "gateway_down", "connection refused: the gateway is restarting")
        opened = self.core.open(**kw)
        if not isinstance(opened, Respond):
            self.calls.append(kw["handle"])
        return opened

    def wake_at(self) -> float:
        return math.inf if self.core is None else self.core.wake_at()

    def _stop(self, now: float) -> None:
        assert self.core is not None
        self.hand_over(self.core)
        for call in self.calls:
            self.sim.drop(call, now, "HTTP 502: the gateway stopped")
        self.calls = []
        self.core = None

    def _start(self, now: float) -> None:
        core = self.core = Flow(self.policy)
        self.sim.take_over(core, now)
        self.take_over(core)
        self.sim.act(core.tick(now), now)


def _nothing(*_args: Any, **_kw: Any) -> list[Any]:
    """What a stopped gateway answers to any event."""
    return []
