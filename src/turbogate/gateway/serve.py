"""A request's life after the edge, as the flow directs it (sched/flow.py): admitted or refused,
queued, dispatched, retried, answered or cut off by its deadline.  This coroutine only waits for
the flow's next step and carries it out — an upstream attempt (gateway/proxy.py) or the
flow's own answer — and, whatever happens, leaves the flow, the usage record and the metrics
knowing how the request ended.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from turbogate.asgi import Headers, Receive, Send, send_error
from turbogate.gateway.proxy import attempt
from turbogate.gateway.runtime import TenantRt
from turbogate.gateway.watch import Watch
from turbogate.sched import FlowRequest, Respond, Tier
from turbogate.sched.metering import LimitRefusal
from turbogate.sched.refusals import refused_by
from turbogate.sched.tiers import TIER_NAME

if TYPE_CHECKING:
    from turbogate.gateway.app import GatewayApp

_TIER_HEADERS = {t: (b"x-turbogate-tier", t.value.encode()) for t in Tier}
_DOWNGRADE = b"x-turbogate-downgrade"
_REQUEST_ID = b"x-turbogate-request-id"  # the id of the request's usage record (docs/metering.md)


#: CPython 3.11's table of each loop's running task: its asyncio.current_task() is a Python
#: function around a lookup in it (3.12 made it C).  Where the table is not there, that function.
_RUNNING_TASKS: dict[Any, asyncio.Task[Any]] | None = getattr(asyncio.tasks, "_current_tasks", None)


def _current_task(loop: asyncio.AbstractEventLoop | None) -> asyncio.Task[Any]:
    """The task running now: the one on ``loop`` (the loop the app started on), if any, else the
    running loop's (without a loop, 3.11's current_task() makes a getpid() system call)."""
    task = _RUNNING_TASKS.get(loop) if _RUNNING_TASKS is not None else None
    if task is None:
        task = asyncio.current_task(loop) or asyncio.current_task()
    assert task is not None
    return task


def answer_headers(app: GatewayApp, req: FlowRequest) -> Headers:
    """What every answer to ``req`` carries: the tier served, the usage record's id, the pool's
    own headers (L3's ``Alt-Svc``) and, when it got less than it asked, why."""
    headers = [_TIER_HEADERS[req.served], (_REQUEST_ID, app.meter.record_id(req).encode()),
               *app.pool_headers[req.pool]]
    if req.downgrade is not None:
        headers.append((_DOWNGRADE, req.downgrade.encode()))
    return headers


async def serve(app: GatewayApp, receive: Receive, send: Send, tenant: TenantRt, req: FlowRequest, body: bytes,
                upstream_path: str, count: bool = True, limit: LimitRefusal | None = None) -> None:
    """Serve ``req`` as the flow directs.  ``count``: False for a coalesced group's shared call,
    whose members are counted one by one (gateway/coalesce.py).  ``limit``: the tenant limits'
    verdict, asked of the store by the edge (gateway/edge.py), the flow's input at arrival."""
    task = _current_task(app.loop)
    meter, flow, driver = app.meter, app.rt.flow, app.driver
    # The request's one object in the shell: the driver's handle, the send that stores its
    # usage record before the last byte, and the watch for its client leaving (gateway/watch.py).
    watch = req.handle = Watch(task, receive, send, req, meter, req.arrival)
    tracked_send = watch.send

    tier_headers = answer_headers(app, req)
    word = app.tier_words[req.served]
    status = 499
    observed_queue = False
    app.watches.add(watch)
    try:
        driver.run(flow.arrive(req, req.arrival if limit is None else time.perf_counter(), limit))
        while True:
            answer = watch.answer()
            if answer is not None:
                status = await respond(app, tracked_send, req, answer)
                break
            replica = watch.replica
            if replica is None:
                watch.start(app)  # a queued request may wait long: notice at once if its client leaves
                await watch.next_step()
                continue
            watch.replica = None
            if watch.retry:
                app.metrics.retries.labels(replica.pool).inc()
            elif not observed_queue:
                observed_queue = True
                app.metrics.observe_queue(TIER_NAME[req.served], (req.dispatched_at or req.arrival) - req.arrival)
            try:
                sent = await attempt(app, req, replica, watch, body, upstream_path, word, tier_headers)
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
            status = await respond(app, tracked_send, req, deadline_answer)
        else:
            raise
    finally:
        watch.finished = True
        app.watches.discard(watch)
        if watch.watcher is not None:
            watch.watcher.cancel()
        if not req.done:  # ended here without the flow knowing (a bug or shutdown): free its place
            driver.run(flow.client_gone(req, time.perf_counter()))
        meter.done(req)
        if count:
            app.metrics.count(tenant.label, TIER_NAME[req.asked], TIER_NAME[req.served], status)
        # The request and its watch point at each other: part the two, so reference counting
        # frees both now (a cycle left each request's objects, its cycle's included, to the GC).
        req.handle = None


async def respond(app: GatewayApp, send: Send, req: FlowRequest, answer: Respond) -> int:
    """Send the flow's own answer (a refusal, a shed, a deadline's 504); its status."""
    headers = answer_headers(app, req)
    if answer.retry_after_s is not None:
        headers.append((b"retry-after", str(answer.retry_after_s).encode()))
        app.metrics.shed.labels(answer.code, TIER_NAME[req.served], refused_by(answer.code)).inc()
    await send_error(send, answer.status, answer.message, param=answer.param, code=answer.code, headers=headers)
    return answer.status
