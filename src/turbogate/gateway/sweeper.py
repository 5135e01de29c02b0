"""One timer per event loop that checks every guarded connection's deadlines (gateway/guard.py),
so a request costs no timer of its own: its deadlines almost never fire, and a timer armed and
cancelled per request would be work on every request for them."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Swept(Protocol):
    loop: asyncio.AbstractEventLoop

    def check(self, now: float) -> None: ...


class Sweeper:
    """Calls ``check(time.monotonic())`` on every live connection each ``every_s``.

    A sweep that runs more than a period late (the loop stalled: a starved or paused process)
    judges nothing and leaves it to the next one: the event loop runs due timers before it reads
    the sockets, so a request that arrived during the stall is still unread, and its connection
    would read as silent past its deadline and be reset (a gateway stopped for 12 s reset a
    connection whose request came in the stall).  Only one sweep in a row is deferred, so a loop
    that is late every time still enforces the deadlines, a period later."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.live: set[Swept] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due = 0.0
        self._deferred = False

    def add(self, conn: Swept) -> None:
        self.live.add(conn)
        loop = conn.loop
        if self._handle is None or self._loop is not loop or loop.is_closed():
            self._loop = loop
            self._schedule(time.monotonic())

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + self.every_s
        self._handle = self._loop.call_later(self.every_s, self._sweep)

    def _sweep(self) -> None:
        self._handle = None
        now = time.monotonic()
        if now - self._due > self.every_s and not self._deferred:
            self._deferred = True
        else:
            self._deferred = False
            for conn in list(self.live):
                conn.check(now)
        if self.live and self._loop is not None:
            self._schedule(now)
