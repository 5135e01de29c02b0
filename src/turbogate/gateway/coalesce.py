"""Coalescing in the gateway: one upstream call, its bytes fanned out to every member of a group.

Who shares a call, for how long, and when the call is given up are the pure rule's
(sched/coalesce.py); this module only moves bytes:

* the **shared call** runs as its own task — the gateway's usual request life (``serve``: L1,
  L2, retry, deadline) for the leader's request — writing the ASGI messages it would send into a
  :class:`SharedAnswer` instead of a client;
* every **member** (the leader's client too) replays those messages to its own client, from the
  first, and then follows live: a stream fans out chunk by chunk, a late joiner gets the whole
  answer so far at once.  Followers' answers carry ``X-Turbogate-Coalesced: true``; the bytes are
  the upstream's own (one response ``id`` for the group);
* a member whose client leaves only leaves; the call is cancelled when the last one has left.

Each member is still a request of its own: it was opened by the flow (tier resolution and
entitlement, so its ``asked``/``served`` are its own), and it is counted in
``turbogate_requests_total`` with the status its client got (metering seam: :meth:`Coalescing._done`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter

from turbogate.asgi import Message, Receive, Send, send_error
from turbogate.config import CoalesceConfig
from turbogate.configpolicy import coalesce_policy
from turbogate.sched import FlowRequest
from turbogate.sched.coalesce import Coalescer, Follow, Group, Lead, request_key

if TYPE_CHECKING:
    from turbogate.gateway.metering import Metering
    from turbogate.gateway.metrics import GatewayMetrics
    from turbogate.gateway.parts import ServeFn
    from turbogate.gateway.runtime import TenantRt
    from turbogate.sched import Flow

log = logging.getLogger("turbogate.gateway")

_FOLLOWER_HEADER = (b"x-turbogate-coalesced", b"true")
_DISCONNECT: Message = {"type": "http.disconnect"}


def _final(message: Message) -> bool:
    return message["type"] == "http.response.body" and not message.get("more_body", False)


class SharedAnswer:
    """The ASGI messages of one upstream answer, kept for every member to replay."""

    __slots__ = ("_all_gone", "_more", "complete", "leader", "messages")

    def __init__(self, leader: FlowRequest | None = None) -> None:
        self.leader = leader  # the request whose call this is (its tokens are every member's usage)
        self.messages: list[Message] = []
        self.complete = False
        self._more: asyncio.Future[None] | None = None
        self._all_gone = asyncio.Event()

    # -- the shared call's side: its ``send`` and ``receive`` --------------------------------------
    async def record(self, message: Message) -> None:
        if self.complete:
            return
        self.messages.append(message)
        self.complete = _final(message)
        more, self._more = self._more, None
        if more is not None and not more.done():
            more.set_result(None)

    async def receive(self) -> Message:
        """The shared call's client "disconnects" when every member has left."""
        await self._all_gone.wait()
        return _DISCONNECT

    def all_gone(self) -> None:
        self._all_gone.set()

    async def end(self) -> None:
        """The call is over: make sure every member's answer ends (an error if nothing was sent)."""
        if self.complete:
            return
        if not self.messages:
            await send_error(self.record, 502, "the shared upstream call ended without an answer",
                             code="upstream_error")
        else:
            await self.record({"type": "http.response.body", "body": b"", "more_body": False})

    # -- a member's side ---------------------------------------------------------------------------
    async def relay(self, send: Send, receive: Receive, extra_headers: list[tuple[bytes, bytes]]) -> int | None:
        """Send every message to one client; its status, or ``None`` when it left before the end."""
        sent = 0
        status = 0
        gone: asyncio.Future[Message] | None = None
        try:
            while True:
                messages = self.messages
                while sent < len(messages):
                    message = messages[sent]
                    sent += 1
                    if message["type"] == "http.response.start":
                        status = message["status"]
                        if extra_headers:
                            message = {**message, "headers": [*message["headers"], *extra_headers]}
                    await send(message)
                    if _final(message):
                        return status
                if gone is None:  # watch the client only while it waits for more
                    gone = asyncio.ensure_future(receive())
                if self._more is None:
                    self._more = asyncio.get_running_loop().create_future()
                await asyncio.wait((self._more, gone), return_when=asyncio.FIRST_COMPLETED)
                if gone.done():
                    if gone.cancelled() or gone.exception() is not None or gone.result()["type"] == "http.disconnect":
                        return None
                    gone = None  # not a disconnect: keep watching
        except OSError:  # the client's connection broke while we wrote to it
            return None
        finally:
            if gone is not None and not gone.done():
                gone.cancel()


class Coalescing:
    """The gateway's side of coalescing: the pure :class:`Coalescer`, the routes it is on for,
    the shared calls in flight and the metrics.  A group's call is ``serve`` (the request's
    life, gateway/serve.py); each member's end is told to ``flow``, ``meter`` and ``metrics``."""

    def __init__(self, config: CoalesceConfig, registry: CollectorRegistry, flow: Flow, meter: Metering,
                 metrics: GatewayMetrics, serve: ServeFn) -> None:
        self.flow = flow
        self.meter = meter
        self.metrics = metrics
        self.serve_call = serve
        self.routes = frozenset(config.routes)
        self.core = Coalescer(coalesce_policy(config))
        self.ignored = frozenset(config.ignore_fields)
        self._tasks: set[asyncio.Task[None]] = set()
        self.merged = Counter("turbogate_coalesced_requests", "Requests served by another request's upstream call "
                              "(coalescing followers)", ["route", "tenant"], registry=registry)
        self.calls = Counter("turbogate_coalesce_calls", "Upstream calls made for coalescible requests (group "
                             "leaders)", ["route"], registry=registry)

    def decide(self, route: str, tenant: TenantRt, req: FlowRequest, body: dict[str, object]) -> Lead | Follow | None:
        """Lead, follow, or ``None`` (route off, or not deterministic: served alone).  The key holds
        the tier asked and served (and why they differ), so members share one answer's headers."""
        if route not in self.routes:
            return None
        key = request_key(tenant.name, route, body, (req.asked.value, req.served.value, req.downgrade or ""),
                          self.ignored)
        if key is None:
            return None
        return self.core.join(key, req.arrival)

    async def serve(self, decision: Lead | Follow, send: Send, receive: Receive, tenant: TenantRt,
                    req: FlowRequest, body: bytes, route: str) -> None:
        group = decision.group
        if isinstance(decision, Lead):
            shared = SharedAnswer(req)
            group.handle = shared
            self.calls.labels(route).inc()
            task = asyncio.get_running_loop().create_task(self._call(group, shared, tenant, req, body, route))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            extra: list[tuple[bytes, bytes]] = []
        else:
            leaders = group.handle  # set by the leader before its first await
            assert isinstance(leaders, SharedAnswer)
            shared = leaders
            self.merged.labels(route, tenant.label).inc()
            if shared.leader is not None:  # metered as a request of its own (gateway/metering.py)
                send = self.meter.follower_send(send, req, shared.leader)
            extra = [_FOLLOWER_HEADER]
        status: int | None = None
        try:
            status = await shared.relay(send, receive, extra)
        finally:  # whatever happened, this member is done (else the call could outlive everyone)
            self._done(group, shared, tenant, req, status)

    async def _call(self, group: Group, shared: SharedAnswer, tenant: TenantRt, req: FlowRequest,
                    body: bytes, route: str) -> None:
        """The group's one upstream call: the usual request life, writing into ``shared``."""
        try:
            await self.serve_call(shared.receive, shared.record, tenant, req, body, route, count=False)
        except asyncio.CancelledError:  # shutdown
            raise
        except Exception:  # a bug, not bad input: every member gets a 500, the server stays up
            log.exception("internal error in a shared call on %s", route)
            if not shared.messages:
                with contextlib.suppress(Exception):
                    await send_error(shared.record, 500, "internal gateway error", code="internal_error")
        finally:
            whole_and_good = req.status == 200 and shared.complete  # else no one new may join
            await shared.end()
            self.core.finished(group, whole_and_good, time.perf_counter())
            # Forget it once its span is over even if no request comes to sweep it (its bytes go
            # when its last member is done).
            asyncio.get_running_loop().call_later(self.core.policy.max_span_s, self._expire)

    def _expire(self) -> None:
        self.core.expire(time.perf_counter())

    def _done(self, group: Group, shared: SharedAnswer, tenant: TenantRt, req: FlowRequest,
              status: int | None) -> None:
        """A member is done.  Metering seam: this is where each member's own usage record goes
        (the answer's usage is the group's; every member received all of it)."""
        if self.core.left(group, whole=status is not None):
            shared.all_gone()  # the last client left early: the shared call's watcher cancels it
        if req is not shared.leader:  # a follower: its record (the leader's is the shared call's own)
            self.flow.settle(req, 499 if status is None else status, time.perf_counter(), shared.leader)
            self.meter.done(req)
        self.metrics.count(tenant.label, req.asked.value, req.served.value, 499 if status is None else status)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
