"""A request's life after the edge, as the flow directs it (sched/flow.py): admitted or refused,
queued, dispatched, retried, answered or cut off by its deadline.  This coroutine only waits for
the flow's next step and carries it out — an upstream attempt (gateway/proxy.py) or the
flow's own answer — and, whatever happens, leaves the flow, the usage record and the metrics
knowing how the request ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from turbogate.asgi import Headers, Receive, Send, send_error
from turbogate.gateway.runtime import TenantRt
from turbogate.gateway.watch import Watch
from turbogate.sched import Flow, FlowRequest, Replica, Respond, Tier
from turbogate.sched.metering import LimitRefusal
from turbogate.sched.tiers import TIER_NAME

if TYPE_CHECKING:
    from turbogate.gateway.driver import FlowDriver
    from turbogate.gateway.metering import Metering
    from turbogate.gateway.metrics import GatewayMetrics
    from turbogate.gateway.parts import Shed

_TIER_HEADERS = {t: (b"x-turbogate-tier", t.value.encode()) for t in Tier}
_DOWNGRADE = b"x-turbogate-downgrade"
_REQUEST_ID = b"x-turbogate-request-id"  # the id of the request's usage record (docs/metering.md)

#: One upstream attempt (gateway/proxy.py): the status sent, or None when the flow has a next step.
Attempt = Callable[[FlowRequest, Replica, Watch, bytes, str, str, Headers], Awaitable[int | None]]

#: Each event loop's running task, read directly where CPython keeps it in a table
#: (``asyncio.current_task`` is then a Python function around the same lookup); else None.
_RUNNING_TASKS: dict[Any, asyncio.Task[Any]] | None = getattr(asyncio.tasks, "_current_tasks", None)


def _current_task(loop: asyncio.AbstractEventLoop | None) -> asyncio.Task[Any]:
    """The task running now: the one on ``loop`` (the loop the gateway started on), if any, else
    the running loop's (``current_task()`` without a loop asks the OS for the running loop)."""
    task = _RUNNING_TASKS.get(loop) if _RUNNING_TASKS is not None else None
    if task is None:
        task = asyncio.current_task(loop) or asyncio.current_task()
    assert task is not None
    return task


class Serve:
    """The request's life after the edge; :meth:`serve` is the gateway's ``ServeFn``
    (gateway/parts.py).  ``attempt`` makes one upstream call (gateway/proxy.py)."""

    def __init__(self, flow: Flow, driver: FlowDriver, meter: Metering, metrics: GatewayMetrics, shed: Shed,
                 pool_headers: dict[str, Headers], tier_words: dict[Tier, str], attempt: Attempt) -> None:
        self.flow = flow
        self.driver = driver
        self.meter = meter
        self.metrics = metrics
        self.shed = shed
        self.pool_headers = pool_headers
        self.tier_words = tier_words
        self.attempt = attempt
        #: the requests being served, each by its ``Watch`` (the sweeper polls them: gateway/watch.py)
        self.watches: set[Watch] = set()
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop the gateway started on (set at start-up)

    def answer_headers(self, req: FlowRequest) -> Headers:
        """What every answer to ``req`` carries: the tier served, the usage record's id, the pool's
        own headers (L3's ``Alt-Svc``) and, when it got less than it asked, why."""
        headers = [_TIER_HEADERS[req.served], (_REQUEST_ID, self.meter.record_id(req).encode()),
                   *self.pool_headers[req.pool]]
        if req.downgrade is not None:
            headers.append((_DOWNGRADE, req.downgrade.encode()))
        return headers

    async def serve(self, receive: Receive, send: Send, tenant: TenantRt, req: FlowRequest, body: bytes,
                    upstream_path: str, count: bool = True, limit: LimitRefusal | None = None) -> None:
        """Serve ``req`` as the flow directs.  ``count``: False for a coalesced group's shared call,
        whose members are counted one by one (gateway/coalesce.py).  ``limit``: the tenant limits'
        verdict, asked of the store by the edge (gateway/edge.py), the flow's input at arrival."""
        task = _current_task(self.loop)
        meter, flow, driver, metrics = self.meter, self.flow, self.driver, self.metrics
        # The request's one object in the shell: the driver's handle, the send that stores its
        # usage record before the last byte, and the watch for its client leaving (gateway/watch.py).
        watch = req.handle = Watch(task, receive, send, req, meter, req.arrival)
        tracked_send = watch.send

        tier_headers = self.answer_headers(req)
        word = self.tier_words[req.served]
        status = 499
        observed_queue = False
        watches = self.watches
        watches.add(watch)
        try:
            driver.run(flow.arrive(req, req.arrival if limit is None else time.perf_counter(), limit))
            while True:
                answer = watch.answer()
                if answer is not None:
                    status = await self.respond(tracked_send, req, answer)
                    break
                replica = watch.replica
                if replica is None:
                    watch.start(driver)  # a queued request may wait long: notice at once if its client leaves
                    await watch.next_step()
                    continue
                watch.replica = None
                if watch.retry:
                    metrics.retries.labels(replica.pool).inc()
                elif not observed_queue:
                    observed_queue = True
                    metrics.observe_queue(TIER_NAME[req.served], (req.dispatched_at or req.arrival) - req.arrival)
                try:
                    sent = await self.attempt(req, replica, watch, body, upstream_path, word, tier_headers)
                except asyncio.CancelledError:
                    if not watch.cancelled or watch.gone or watch.answer() is not None:
                        raise
                    # Withdrawn by the flow with nothing sent (its replica was ejected: sched/hung.py):
                    # the request goes on to the flow's next step, a dispatch elsewhere.
                    task.uncancel()
                    watch.cancelled = False
                    continue
                if sent is not None:
                    status = sent
                    break
        except asyncio.CancelledError:
            if watch.gone:
                task.uncancel()
                status = 499
            elif watch.cancelled and (deadline_answer := watch.answer()) is not None:  # the flow's deadline: its 504
                task.uncancel()
                status = await self.respond(tracked_send, req, deadline_answer)
            else:
                raise
        finally:
            watch.finished = True
            watches.discard(watch)
            if watch.watcher is not None:
                watch.watcher.cancel()
            if not req.done:  # ended here without the flow knowing (a bug or shutdown): free its place
                driver.run(flow.client_gone(req, time.perf_counter()))
            meter.done(req)
            if count:
                metrics.count(tenant.label, TIER_NAME[req.asked], TIER_NAME[req.served], status)
            # The request and its watch point at each other: part the two, so reference counting
            # frees both now rather than leaving each request's objects to the cycle collector.
            req.handle = None

    async def respond(self, send: Send, req: FlowRequest, answer: Respond) -> int:
        """Send the flow's own answer (a refusal, a shed, a deadline's 504); its status."""
        headers = self.answer_headers(req)
        if answer.retry_after_s is not None:
            headers.append((b"retry-after", str(answer.retry_after_s).encode()))
            self.shed.count(answer.code, TIER_NAME[req.served])
        await send_error(send, answer.status, answer.message, param=answer.param, code=answer.code,
                         headers=headers)
        return answer.status
