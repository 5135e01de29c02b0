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
    """Calls ``check(time.monotonic())`` on every live connection each ``every_s``."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.live: set[Swept] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, conn: Swept) -> None:
        self.live.add(conn)
        loop = conn.loop
        if self._handle is None or self._loop is not loop or loop.is_closed():
            self._loop = loop
            self._handle = loop.call_later(self.every_s, self._sweep)

    def _sweep(self) -> None:
        self._handle = None
        now = time.monotonic()
        for conn in list(self.live):
            conn.check(now)
        if self.live and self._loop is not None:
            self._handle = self._loop.call_later(self.every_s, self._sweep)
