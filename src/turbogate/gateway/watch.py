"""Noticing a client that leaves: what ends a request's life from the client's side.

Queued requests are watched at once; running ones only after ``WATCH_AFTER_S`` (by the sweeper):
a watcher task per request was a large share of the gateway's CPU per request, and a quick
request is over before it matters.  Under uvicorn a watched request needs no task either: the
sweeper reads the connection's ``disconnected`` flag (set when it is lost) every ``SWEEP_S``;
when a busy machine held the loop back, the sweeper found many requests past the age and their
watcher tasks cost more CPU than the rest of their path.  Other servers (and a coalesced group's
shared call) get a task waiting on ``receive()``.  What the leaving means — its place freed, its
upstream call cancelled — is the flow's decision (``Flow.client_gone``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from turbogate.asgi import Receive
from turbogate.gateway.driver import Handle
from turbogate.sched import FlowRequest

if TYPE_CHECKING:
    from turbogate.gateway.app import GatewayApp

WATCH_AFTER_S = 0.05
SWEEP_S = 0.05


class Watch:
    """One request's watch for its client leaving (see the module docstring)."""

    __slots__ = ("born", "cycle", "finished", "gone", "handle", "receive", "req", "task")

    def __init__(self, receive: Receive, req: FlowRequest, handle: Handle, born: float) -> None:
        self.receive = receive
        self.req = req
        self.handle = handle
        self.born = born
        self.finished = False
        self.gone = False
        self.task: asyncio.Task[None] | None = None
        self.cycle: object | None = None  # uvicorn's request cycle, when its flag is polled

    def start(self, app: GatewayApp) -> None:
        if self.task is not None or self.cycle is not None:
            return
        cycle = getattr(self.receive, "__self__", None)
        if cycle is not None and hasattr(cycle, "disconnected"):
            self.cycle = cycle
            self.poll(app)
        else:
            self.task = asyncio.get_running_loop().create_task(self._watch(app))

    def poll(self, app: GatewayApp) -> None:
        if getattr(self.cycle, "disconnected", False):
            self._left(app)

    async def _watch(self, app: GatewayApp) -> None:
        message = await self.receive()
        if message["type"] == "http.disconnect":
            self._left(app)

    def _left(self, app: GatewayApp) -> None:
        if self.finished or self.gone:
            return
        self.gone = True
        app.driver.run(app.rt.flow.client_gone(self.req, time.perf_counter()))
        if not self.handle.cancelled:
            self.handle.task.cancel()


async def sweep(app: GatewayApp) -> None:
    """Watch ``app``'s requests still running after ``WATCH_AFTER_S``; poll the connections of
    those already watched by their flag.  Runs for the app's life."""
    while True:
        await asyncio.sleep(SWEEP_S)
        watch_before = time.perf_counter() - WATCH_AFTER_S
        for w in list(app.watches):
            if w.cycle is not None:
                w.poll(app)
            elif w.task is None and w.born < watch_before:
                w.start(app)
