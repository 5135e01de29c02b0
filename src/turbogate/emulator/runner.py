"""The engine's loop in real time: ``EngineLoop`` (virtual time) paced against the wall clock.

Virtual seconds map to ``time_scale`` wall seconds (0: steps run back to back, yielding to the
event loop between steps so requests that arrive meanwhile join the next batch, as they would
on a busy GPU).  One asyncio task sleeps until the step in progress should end, advances the
loop and hands the step's results to the waiting requests: finished ones get their result,
streaming ones the tokens produced since their last chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from turbogate.emulator.metrics import EmulatorMetrics
from turbogate.engine import Engine, EngineLoop, Finished, FinishReason, Request, StepResult
from turbogate.errors import TurbogateError

log = logging.getLogger("turbogate.emulator")

# Behind schedule by more than this (CPU starved): re-anchor rather than burst.  A busy machine's scheduler
# stalls a process now and then (hundreds of milliseconds when it is shared by many): the modelled GPU kept
# working meanwhile, so the steps due are run back to back and their tokens delivered late but in full,
# keeping the fleet's throughput; a longer stall is time lost for good, and counted as such.
MAX_CATCH_UP_S = 1.0

StreamItem = tuple[int, FinishReason | None]  # output tokens so far, finish reason on the last one


class Aborted(TurbogateError):
    """The request left the engine before finishing (client gone, or the engine stopped)."""


class Handle:
    """A request in flight: a future (non-streaming) or a queue of progress items (streaming)."""

    __slots__ = ("arrival", "done", "queue", "request_id", "sent")

    def __init__(self, request_id: str, arrival: float, stream: bool) -> None:
        self.request_id = request_id
        self.arrival = arrival
        loop = asyncio.get_running_loop()
        self.done: asyncio.Future[Finished] = loop.create_future()
        self.queue: asyncio.Queue[StreamItem | None] | None = asyncio.Queue() if stream else None
        self.sent = 0  # output tokens already handed to the stream


class EngineRunner:
    def __init__(self, engine: Engine, metrics: EmulatorMetrics, time_scale: float) -> None:
        self.engine = engine
        self.loop = EngineLoop(engine)
        self.metrics = metrics
        self.time_scale = time_scale
        self._handles: dict[str, Handle] = {}
        self._streams: dict[str, Handle] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Virtual time is anchored at the start of the step in progress (or the end of the last
        # one while idle): (virtual seconds, wall clock at that moment).
        self._anchor_v = 0.0
        self._anchor_wall = time.perf_counter()
        self.failure: BaseException | None = None  # set if the engine loop crashed (a bug): /health says so

    def start(self) -> None:
        self._anchor_wall = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-loop")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for handle in list(self._handles.values()):
            self._fail(handle)

    def _virtual_now(self, wall: float) -> float:
        """Virtual time at ``wall``: never past the end of the step in progress (it ends when advanced)."""
        if self.time_scale <= 0:
            return self._anchor_v
        v = self._anchor_v + max(0.0, wall - self._anchor_wall) / self.time_scale
        end = self.loop.next_time()
        return v if end is None or v < end else end

    def model_now(self) -> float:
        """The engine's model clock now (what its metrics' time windows run on)."""
        return self._virtual_now(time.perf_counter())

    def submit(self, req: Request, stream: bool) -> Handle:
        """Queue ``req``; raises engine errors (e.g. RequestTooLarge) unchanged."""
        if self.failure is not None:
            raise RuntimeError(f"engine loop failed: {self.failure!r}")
        now = time.perf_counter()  # uvloop's loop.time() has 1 ms resolution
        v = self._virtual_now(now)
        idle = self.loop.next_time() is None
        self.loop.submit(req, v)
        if idle:  # the submit started a step: it runs from now
            self._anchor_v, self._anchor_wall = v, now
            self._wake.set()
        handle = Handle(req.request_id, now, stream)
        self._handles[req.request_id] = handle
        if stream:
            self._streams[req.request_id] = handle
        return handle

    def abort(self, request_id: str) -> None:
        handle = self._handles.pop(request_id, None)
        self._streams.pop(request_id, None)
        self.loop.abort(request_id, self._virtual_now(time.perf_counter()))
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
            self._streams.clear()

    async def _loop(self) -> None:
        clock = time.perf_counter
        scale = self.time_scale
        loop = self.loop
        while True:
            end = loop.next_time()
            if end is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            # Steps are paced against a schedule, not against each wake-up: the event loop's timers
            # fire late by up to a millisecond, and at ~7 ms a step that error would add up.
            step_wall = self._anchor_wall
            planned_end = step_wall + (end - self._anchor_v) * scale
            delay = planned_end - clock() if scale > 0 else 0.0
            # Steps that are due at once (catching up) still let requests that arrived meanwhile join them.
            await asyncio.sleep(delay if delay > 0 else 0)
            now = clock()
            result = loop.advance(end)  # also starts the next step, at virtual `end`
            self._anchor_v = end
            late = now - planned_end
            self._anchor_wall = planned_end if scale > 0 and late < MAX_CATCH_UP_S else now
            if scale > 0:
                self.metrics.behind_last.set(max(0.0, late))
                if late >= MAX_CATCH_UP_S:  # re-anchored: the model clock now runs `late` behind for good
                    self.metrics.behind_total.inc(late)
            self._deliver(result, step_wall, now)

    def _deliver(self, result: StepResult, step_wall: float, now: float) -> None:
        handles = self._handles
        metrics = self.metrics
        for rid in result.scheduled_first:
            handle = handles.get(rid)
            if handle is not None:
                metrics.queue.observe(max(0.0, step_wall - handle.arrival))
        for rid in result.first_token:
            handle = handles.get(rid)
            if handle is not None:
                metrics.ttft.observe(now - handle.arrival)
        for done in result.finished:
            handle = handles.pop(done.request_id, None)
            if handle is None:
                continue  # aborted while the step ran
            metrics.e2e.observe(now - handle.arrival)
            if handle.queue is not None:
                del self._streams[done.request_id]
                handle.queue.put_nowait((done.output_tokens, done.finish_reason))
            handle.done.set_result(done)
        # One chunk per step per stream, with the tokens produced since its last chunk.
        output_tokens = self.engine.output_tokens
        for rid, handle in self._streams.items():
            produced = output_tokens(rid)
            if produced > handle.sent:
                handle.sent = produced
                assert handle.queue is not None
                handle.queue.put_nowait((produced, None))
