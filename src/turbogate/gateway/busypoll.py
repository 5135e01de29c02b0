"""Busy polling after a request arrives (``listen.busy_poll_us``, off by default).

At low load the gateway's core sleeps between a request's events: the request arrives, goes
upstream, and the process sleeps in epoll until the engine answers.  Each wake-up from that sleep
costs tens of microseconds on a virtual machine (the idle vCPU is halted and must be woken by the
host), and the caches have gone cold meanwhile, so a one-connection request costs about twice the
CPU it costs on a busy core (docs/gateway.md, "Fifth pass").  With a window set, every request's
arrival keeps the event loop turning without sleeping for that long — each turn polls the sockets
with a zero timeout — so the engine's answer is read the moment it lands.  The price is CPU while
the window is open (a core at full use under steady light load); under heavy load the loop never
sleeps anyway and the window costs nothing.  The kernel's ``net.core.busy_poll`` is the same
trade for sockets on a real network card; it does nothing for loopback or most virtual NICs.
"""

from __future__ import annotations

import asyncio
import time


class BusyPoll:
    """Keeps one event loop from sleeping for ``window_s`` after each :meth:`kick`."""

    __slots__ = ("_loop", "_spinning", "_until", "window_s")

    def __init__(self, loop: asyncio.AbstractEventLoop, window_s: float) -> None:
        self._loop = loop
        self.window_s = window_s
        self._until = 0.0
        self._spinning = False

    def kick(self) -> None:
        self._until = time.perf_counter() + self.window_s
        if not self._spinning:
            self._spinning = True
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        # A callback ready to run makes the loop poll with a zero timeout instead of sleeping.
        if time.perf_counter() < self._until and not self._loop.is_closed():
            self._loop.call_soon(self._spin)
        else:
            self._spinning = False
