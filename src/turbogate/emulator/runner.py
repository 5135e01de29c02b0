"""Drive the engine in real time: one asyncio task steps it and hands tokens to waiters.

Each step's events are delivered ``duration × time_scale`` seconds after the step starts
(time_scale 0: at once, yielding to the event loop between steps so new requests join the
next batch, as they would on a busy GPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from turbogate.emulator.metrics import EmulatorMetrics
from turbogate.engine import Engine, Request, TokenEvent

log = logging.getLogger("turbogate.emulator")

MAX_CATCH_UP_S = 0.05  # behind schedule by more than this (CPU starved): re-anchor rather than burst


class Aborted(Exception):
    """The request left the engine before finishing (client gone, or the engine stopped)."""


class Handle:
    """A request in flight: a future (non-streaming) or a queue of token events (streaming)."""

    __slots__ = ("arrival", "done", "queue", "request_id")

    def __init__(self, request_id: str, arrival: float, stream: bool) -> None:
        self.request_id = request_id
        self.arrival = arrival
        loop = asyncio.get_running_loop()
        self.done: asyncio.Future[TokenEvent] = loop.create_future()
        self.queue: asyncio.Queue[TokenEvent | None] | None = asyncio.Queue() if stream else None


class EngineRunner:
    def __init__(self, engine: Engine, metrics: EmulatorMetrics, time_scale: float) -> None:
        self.engine = engine
        self.metrics = metrics
        self.time_scale = time_scale
        self._handles: dict[str, Handle] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None  # set if the engine loop crashed (a bug): /health says so

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-loop")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for handle in list(self._handles.values()):
            self._fail(handle)

    def submit(self, req: Request, stream: bool) -> Handle:
        """Queue ``req``; raises engine errors (e.g. RequestTooLarge) unchanged."""
        if self.failure is not None:
            raise RuntimeError(f"engine loop failed: {self.failure!r}")
        now = time.perf_counter()  # uvloop's loop.time() has 1 ms resolution
        self.engine.add_request(req, now)
        handle = Handle(req.request_id, now, stream)
        self._handles[req.request_id] = handle
        self._wake.set()
        return handle

    def abort(self, request_id: str) -> None:
        handle = self._handles.pop(request_id, None)
        self.engine.abort(request_id)
        if handle is not None:
            self._fail(handle)

    @staticmethod
    def _fail(handle: Handle) -> None:
        if not handle.done.done():
            handle.done.set_exception(Aborted(handle.request_id))
            handle.done.exception()  # mark retrieved: nobody may be waiting any more
        if handle.queue is not None:
            handle.queue.put_nowait(None)  # wakes a streaming reader; None = aborted

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("engine loop failed; failing all requests in flight")
            self.failure = exc
            for handle in list(self._handles.values()):
                self._fail(handle)
            self._handles.clear()

    async def _loop(self) -> None:
        clock = time.perf_counter
        engine = self.engine
        scale = self.time_scale
        # Steps are paced against a schedule, not against each wake-up: the event loop's timers
        # fire late by up to a millisecond, and at ~7 ms a step that error would add up.
        planned_end = clock()
        while True:
            if not engine.has_work():
                self._wake.clear()
                await self._wake.wait()
                planned_end = clock()
                continue
            now = clock()
            start = planned_end if now - planned_end < MAX_CATCH_UP_S else now
            result = engine.step(now)
            for rid in result.scheduled_first:
                handle = self._handles.get(rid)
                if handle is not None:
                    self.metrics.queue.observe(now - handle.arrival)
            if scale > 0:
                planned_end = max(start + result.duration * scale, now)
                delay = planned_end - clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                self._deliver(result.events, clock())
            else:
                self._deliver(result.events, clock())
                await asyncio.sleep(0)

    def _deliver(self, events: list[TokenEvent], now: float) -> None:
        handles = self._handles
        metrics = self.metrics
        for event in events:
            handle = handles.get(event.request_id)
            if handle is None:
                continue  # aborted while the step ran
            if event.first_token:
                metrics.ttft.observe(now - handle.arrival)
            if handle.queue is not None:
                handle.queue.put_nowait(event)
            if event.finish_reason is not None:
                metrics.e2e.observe(now - handle.arrival)
                del handles[event.request_id]
                if not handle.done.done():
                    handle.done.set_result(event)
