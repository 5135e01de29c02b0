"""One request's object in the gateway's shell (``Watch``): the driver's handle on it, the
``send`` that stores its usage record before the answer's last byte, and the watch for its client
leaving — one object a request, so a request costs one allocation and its end frees it at once.

Noticing a client that leaves is what ends a request's life from the client's side.

Queued requests are watched at once; running ones only after ``WATCH_AFTER_S`` (by the sweeper):
a task per request would cost more than a quick request's whole path, and a quick request is
over before its client's leaving matters.  Under uvicorn a watched request needs no task either:
the sweeper reads the connection's ``disconnected`` flag (set when it is lost) every
``SWEEP_S``, so a loop held back by a busy machine, which finds many requests past the age at
once, starts no tasks for them.  Other servers (and a coalesced group's shared call) get a task
waiting on ``receive()``.  What the leaving means — its place freed, its
upstream call cancelled — is the flow's decision (``Flow.client_gone``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from turbogate.asgi import Message, Receive, Send
from turbogate.gateway.cycle import LeanCycle
from turbogate.gateway.driver import Handle
from turbogate.sched import FlowRequest

if TYPE_CHECKING:
    from turbogate.gateway.driver import FlowDriver
    from turbogate.gateway.metering import Metering

WATCH_AFTER_S = 0.05
SWEEP_S = 0.05


class Watch(Handle):
    """One request in the shell (see the module docstring): the driver's ``Handle`` on its
    coroutine (``task``), its ``send``, and its watch (``watcher``: a task waiting on ``receive``;
    ``cycle``: uvicorn's cycle, whose flag the sweeper polls)."""

    __slots__ = ("_send", "born", "cycle", "finished", "gone", "meter", "receive", "req", "watcher")

    def __init__(self, task: asyncio.Task[object], receive: Receive, send: Send, req: FlowRequest,
                 meter: Metering, born: float) -> None:
        super().__init__(task)
        self.receive = receive
        self._send = send
        self.req = req
        self.meter = meter
        self.born = born
        self.finished = False
        self.gone = False
        self.watcher: asyncio.Task[None] | None = None
        self.cycle: object | None = None

    def _last_byte(self) -> asyncio.Future[None] | None:
        """The answer's last byte is next: the request is finished, and its usage record is made
        durable; the future to await first where the store must hold it (a Turbo budget's spend)."""
        self.finished = True  # from here a disconnect is the normal end, not the client leaving
        return self.meter.durable(self.req)

    async def send(self, message: Message) -> None:
        """The server's ``send``, with the usage record made durable before the last byte."""
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            stored = self._last_byte()
            if stored is not None:
                await self.meter.stored(self.req, stored)
        await self._send(message)

    async def send_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """``send`` of a whole answer (its start and its one body message), made durable first as
        ``send`` does, and written in one go where the server is the lean cycle
        (``LeanCycle.send_whole``).  ``headers`` without ``content-length``: it is added."""
        stored = self._last_byte()
        if stored is not None:
            await self.meter.stored(self.req, stored)
        cycle = getattr(self._send, "__self__", None)
        if type(cycle) is LeanCycle and cycle.send_whole(status, headers, body):
            return
        await self._send({"type": "http.response.start", "status": status,
                          "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await self._send({"type": "http.response.body", "body": body})

    def start(self, driver: FlowDriver) -> None:
        """Watch for the client leaving; the flow hears of it through ``driver``."""
        if self.watcher is not None or self.cycle is not None:
            return
        cycle = getattr(self.receive, "__self__", None)
        if cycle is not None and hasattr(cycle, "disconnected"):
            self.cycle = cycle
            self.poll(driver)
        else:
            self.watcher = asyncio.get_running_loop().create_task(self._watch(driver))

    def poll(self, driver: FlowDriver) -> None:
        if getattr(self.cycle, "disconnected", False):
            self._left(driver)

    async def _watch(self, driver: FlowDriver) -> None:
        message = await self.receive()
        if message["type"] == "http.disconnect":
            self._left(driver)

    def _left(self, driver: FlowDriver) -> None:
        if self.finished or self.gone:
            return
        self.gone = True
        driver.run(driver.flow.client_gone(self.req, time.perf_counter()))
        if not self.cancelled:
            self.task.cancel()


async def sweep(watches: set[Watch], driver: FlowDriver) -> None:
    """Watch the requests in ``watches`` still running after ``WATCH_AFTER_S``; poll the
    connections of those already watched by their flag.  Runs for the gateway's life."""
    while True:
        await asyncio.sleep(SWEEP_S)
        _sweep_once(watches, driver, time.perf_counter() - WATCH_AFTER_S)


def _sweep_once(watches: set[Watch], driver: FlowDriver, watch_before: float) -> None:
    # A function of its own: a loop variable in sweep() would keep the last watch it saw (and
    # its request) alive while it sleeps.
    for w in list(watches):
        if w.cycle is not None:
            w.poll(driver)
        elif w.watcher is None and w.born < watch_before:
            w.start(driver)
