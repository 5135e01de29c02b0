"""The asyncio driver of the pure request flow (sched/flow.py): it feeds events with the real
clock and carries out the actions, and decides nothing itself.

* ``Dispatch`` / ``Respond`` for a request wake the coroutine serving it (``Handle``);
* ``Cancel`` cancels that coroutine's upstream call (it then answers the ``Respond`` that follows);
* ``Probe`` starts a health check whose result goes back as ``flow.probed``;
* ``HealthChange`` is logged (a warning names the replica and the reason);
* ``MeasureRtt`` / ``WarmUp`` start a round-trip probe / a warm-up request (gateway/regions.py)
  whose result goes back as ``flow.rtt_measured`` / ``flow.warmed``.

An upstream attempt's news comes in through ``first_byte``, ``finished`` and ``failed``
(gateway/proxy.py), stamped with the driver's clock; ``failure_kind`` is the one mapping from the
transport's errors to the flow's failure kinds.  What follows a failure (a retry, a 502 and its
usage record) is the flow's decision, as in the simulator (tests/test_two_drivers.py).

One timer per process: after every event the driver arms the loop at ``flow.wake_at()`` — asked
only when the flow's ``timers_epoch`` says a due time may have come nearer since it last asked.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable

from turbogate.errors import UpstreamError
from turbogate.sched import (
    Cancel,
    Dispatch,
    Failure,
    Flow,
    FlowRequest,
    HealthChange,
    MetricsDoubt,
    Probe,
    Replica,
    Respond,
)
from turbogate.sched.regions import MeasureRtt
from turbogate.sched.warmup import WarmUp

log = logging.getLogger("turbogate.gateway")


class Handle:
    """The gateway side of one request: the coroutine's task and what the flow told it last."""

    __slots__ = ("cancelled", "replica", "respond", "retry", "task", "waiter")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.replica: Replica | None = None
        self.retry = False
        self.respond: Respond | None = None
        self.cancelled = False  # the flow cancelled the upstream call (its Respond follows)
        self.waiter: asyncio.Future[None] | None = None

    def answer(self) -> Respond | None:
        """The flow's answer, read through a call: after an ``await`` it may have been set, and a
        plain ``self.respond`` read would let mypy (and mypyc's checks) narrow it to None."""
        return self.respond

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_step(self) -> None:
        """Wait until the flow dispatches or answers this request."""
        if self.replica is not None or self.respond is not None:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None


def failure_kind(exc: BaseException) -> Failure:
    """How an upstream attempt failed, as the flow's kind: no connection at all, broken before
    any byte of the answer, or broken after."""
    if isinstance(exc, UpstreamError):
        if exc.connect_failed:
            return Failure.CONNECT
        if exc.before_response:
            return Failure.RESET
    return Failure.BROKEN


class FlowDriver:
    def __init__(self, flow: Flow, probe: Callable[[Replica], Awaitable[bool]],
                 on_health: Callable[[HealthChange], None] | None = None, *,
                 measure_rtt: Callable[[Replica], Awaitable[float | None]] | None = None,
                 warm_up: Callable[[Replica, str], Awaitable[bool]] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.flow = flow
        self.clock = clock  # the flow's ``now`` (a test's fake clock drives it without sockets)
        self._probe = probe
        self._measure_rtt = measure_rtt
        self._warm_up = warm_up
        self._on_health = on_health
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = math.inf
        self._looked_at = -1  # the flow's timers_epoch when wake_at was last asked (-1: ask now)
        self._tasks: set[asyncio.Task[None]] = set()
        # Replicas that answered a scrape or a health check since start: one that never has is "not up yet"
        # in the log (its engine may still be loading), not "ejected".
        self.answered: set[str] = set()

    def now(self) -> float:
        return self.clock()

    # ---- one upstream attempt's news (gateway/proxy.py) -------------------------------------------
    def first_byte(self, req: FlowRequest, headers_at: float | None = None) -> float:
        """The answer's first byte came (``headers_at``: a stream's headers before it); the time."""
        now = self.clock()
        self.run(self.flow.first_byte(req, now, headers_at))
        return now

    def finished(self, req: FlowRequest, status: int) -> float:
        """The replica's answer is complete, with ``status``; the time."""
        now = self.clock()
        self.run(self.flow.finished(req, now, status))
        return now

    def failed(self, req: FlowRequest, exc: BaseException, sent_bytes: int = 0, sent_tokens: int = 0) -> Respond | None:
        """The attempt failed with ``exc`` after its client got ``sent_bytes`` (``sent_tokens``
        of the answer); the flow's answer to the request, None when it sent it elsewhere."""
        self.run(self.flow.failed(req, self.clock(), failure_kind(exc), sent_bytes, sent_tokens))
        handle = req.handle
        return handle.answer() if isinstance(handle, Handle) else None

    def run(self, actions: Iterable[object]) -> None:
        """Carry out ``actions``, then re-arm the timer."""
        for action in actions:
            if isinstance(action, Dispatch):
                handle = action.req.handle
                if isinstance(handle, Handle):
                    handle.replica = action.replica
                    handle.retry = action.retry
                    handle.wake()
            elif isinstance(action, Respond):
                handle = action.req.handle if action.req is not None else None
                if isinstance(handle, Handle):
                    handle.respond = action
                    handle.wake()
            elif isinstance(action, Cancel):
                handle = action.req.handle
                if isinstance(handle, Handle) and not handle.cancelled:
                    handle.cancelled = True
                    handle.task.cancel()
            elif isinstance(action, Probe):
                self._spawn(self._run_probe(action.replica))
            elif isinstance(action, HealthChange):
                rid, pool = action.replica.id, action.replica.pool
                if action.healthy:
                    up = "is back" if rid in self.answered else "is up"
                    self.answered.add(rid)
                    log.warning("replica %s (pool %s) %s: %s", rid, pool, up, action.reason)
                elif rid in self.answered:
                    log.warning("replica %s (pool %s) ejected: %s", rid, pool, action.reason)
                else:
                    log.warning("replica %s (pool %s) not up yet (%s); it is probed until it answers", rid, pool,
                                action.reason)
                if self._on_health is not None:
                    self._on_health(action)
            elif isinstance(action, MetricsDoubt):
                log.warning("replica %s (pool %s): %s", action.replica.id, action.replica.pool, action.reason)
            elif isinstance(action, MeasureRtt) and self._measure_rtt is not None:
                self._spawn(self._run_rtt(action.replica, self._measure_rtt))
            elif isinstance(action, WarmUp) and self._warm_up is not None:
                self._spawn(self._run_warm_up(action.replica, action.model, self._warm_up))
        self._arm()

    def _arm(self) -> None:
        epoch = self.flow.timers_epoch
        if epoch == self._looked_at:  # no due time came nearer since the last look: the timer stands
            return
        self._looked_at = epoch
        wake = self.flow.wake_at()
        if wake >= self._armed_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = wake
        if math.isinf(wake):
            self._timer = None
            return
        delay = max(0.0, wake - self.clock())
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._armed_at = math.inf
        self._looked_at = -1  # nothing is armed now: look again after the tick
        self.run(self.flow.tick(self.clock()))

    async def _run_probe(self, replica: Replica) -> None:
        ok = await self._probe(replica)
        self.run(self.flow.probed(replica.id, ok, self.clock()))
        if ok:
            self.answered.add(replica.id)

    async def _run_rtt(self, replica: Replica, measure: Callable[[Replica], Awaitable[float | None]]) -> None:
        rtt = await measure(replica)
        self.run(self.flow.rtt_measured(replica.id, rtt, self.clock()))

    async def _run_warm_up(self, replica: Replica, model: str,
                           warm: Callable[[Replica, str], Awaitable[bool]]) -> None:
        ok = await warm(replica, model)
        self.run(self.flow.warmed(replica.id, ok, self.clock()))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
