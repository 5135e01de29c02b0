"""One upstream attempt: send the request to the replica the flow chose, pass the answer through
(JSON tagged with the tier, or SSE rewritten chunk by chunk) and report what happened to the
flow through its driver (``first_byte``, ``finished``, ``failed`` with the error and what the
client already has).  Whether to retry, what a failure means for the replica, the status the
client then gets and the usage record are the flow's decisions, not this module's: it writes
the flow's answer, as a whole error or, once a stream began, as its last event.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from turbogate.asgi import error_body
from turbogate.errors import UpstreamError
from turbogate.gateway.conformance import engine_error
from turbogate.gateway.sse import SSERewriter, tag_json_body
from turbogate.gateway.usage_scan import hold_done, take_json_usage, take_stream_usage
from turbogate.sched import FlowRequest, Replica, Respond
from turbogate.sched.tiers import TIER_NAME

if TYPE_CHECKING:
    from turbogate.asgi import Send
    from turbogate.gateway.driver import FlowDriver
    from turbogate.gateway.metrics import GatewayMetrics
    from turbogate.gateway.runtime import ReplicaIO
    from turbogate.gateway.watch import Watch
    from turbogate.sched import Flow

_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def _timing(l1: float, l3: float | None, l2: float, upstream: float, last: bytes = b"upstream") -> tuple[bytes, bytes]:
    """Where the request's time went, in the layers' order; ``l3`` (the round trip to the pool L3 chose, as
    L3 measures it) only when the request met L3 (pools with regions, or a model in several pools)."""
    l3_part = b"" if l3 is None else b"l3;dur=%.3f, " % (l3 * 1e3)
    return (b"server-timing", b"l1;dur=%.3f, %sl2;dur=%.3f, %s;dur=%.3f" % (l1 * 1e3, l3_part, l2 * 1e3, last,
                                                                             upstream * 1e3))


def _head_bytes(headers: list[tuple[bytes, bytes]]) -> int:
    """About the bytes of a response's head (status line and headers) on the wire."""
    return 17 + sum(len(k) + len(v) + 4 for k, v in headers)


async def _end_stream(send: Send, rewriter: SSERewriter, answer: Respond) -> int:
    """End a stream already begun with the flow's ``answer`` as its last event; its status."""
    err = error_body(answer.status, answer.message, code=answer.code)
    await send({"type": "http.response.body", "body": rewriter.flush() + b"data: " + err + b"\n\n"})
    return answer.status


class Upstream:
    """Upstream attempts to the replicas in ``replicas`` (their I/O side); what happened goes
    to the flow through ``driver``, the timings to ``metrics``.  ``strip``: the requests whose
    stream's usage chunk the gateway asked for (gateway/metering.py), not sent to their client.
    :meth:`attempt` is what serve.py calls (its ``Attempt``)."""

    def __init__(self, flow: Flow, driver: FlowDriver, replicas: dict[str, ReplicaIO], metrics: GatewayMetrics,
                 strip: set[int]) -> None:
        self.flow = flow
        self.driver = driver
        self.replicas = replicas
        self.metrics = metrics
        self.strip = strip

    def _l3_s(self, req: FlowRequest) -> float | None:
        flow = self.flow
        return flow.regions.latency_s(req.client_region, req.pool) if flow.l3 else None  # client_region: L3's key

    async def attempt(self, req: FlowRequest, replica: Replica, watch: Watch, body: bytes, path: str,
                      tier_name: str, tier_headers: list[tuple[bytes, bytes]]) -> int | None:
        """Run one attempt; the HTTP status sent to the client, or ``None`` when the client got
        nothing yet and the flow has a next step for the request (a retry, or an error answer).
        ``watch``: the request's object in the shell, whose ``send`` stores the usage record
        before the answer's last byte."""
        send = watch.send
        io = self.replicas[replica.id]
        client = io.client_for(req.served)  # the tier's DSCP-marked pool, if it has one
        assert client is not None
        driver, metrics = self.driver, self.metrics
        start = time.perf_counter()
        l1 = (req.dispatched_at or start) - req.arrival
        l2 = start - (req.dispatched_at or start)
        l3 = self._l3_s(req)
        try:
            resp = await client.request(b"POST", path, body)
        except UpstreamError as exc:
            driver.failed(req, exc)
            return None
        try:
            if not req.stream or resp.status != 200:
                try:
                    data = resp.take_body() or await resp.read()  # (an empty body is read again: b"")
                except UpstreamError as exc:  # nothing reached the client
                    driver.failed(req, exc)
                    return None
                status = resp.status
                if status == 200:
                    take_json_usage(req, data)
                end = driver.finished(req, status)
                metrics.observe_upstream(replica.pool, TIER_NAME[req.served], end - start)
                ctype = resp.content_type
                if status == 200 and ctype.startswith(b"application/json"):
                    data = tag_json_body(data, tier_name)
                elif status != 200:  # whatever the engine's error shape, the client gets the gateway's
                    data, ctype = engine_error(status, data), b"application/json"
                await watch.send_whole(status, [(b"content-type", ctype), *tier_headers,
                                                _timing(l1, l3, l2, end - start)], data)
                return status
            headers_at = time.perf_counter()  # engines answer a stream's headers before prefill: an L3 round trip
            try:
                first = await resp.next_chunk()
            except UpstreamError as exc:  # nothing reached the client yet
                driver.failed(req, exc)
                return None
            now = driver.first_byte(req, headers_at)
            ttft = now - start
            metrics.observe_ttft(replica.pool, TIER_NAME[req.served], ttft)
            metrics.observe_first_token(TIER_NAME[req.served], now - req.arrival)
            # Headers wait for the first chunk, so Server-Timing can carry ttft; total upstream
            # time of a stream is not known at header time (see docs/gateway.md).
            head = [*_SSE_HEADERS, *tier_headers, _timing(l1, l3, l2, ttft, b"ttft")]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            rewriter = SSERewriter(tier_name)
            strip = req.id in self.strip  # the usage chunk was the gateway's request, not the client's
            done = b""  # "data: [DONE]", sent only with the final byte, after the usage record is stored
            chunk = first
            sent = events = 0  # what the client has of the answer: body bytes, SSE events (about one token each)
            try:
                while chunk:
                    replica.chunks += 1  # its progress, for the hung-replica rule (sched/hung.py)
                    out = rewriter.feed(chunk)
                    if out:
                        out, held = hold_done(take_stream_usage(req, out, strip))
                        done += held
                        if out:
                            await send({"type": "http.response.body", "body": out, "more_body": True})
                            sent += len(out)
                            events += out.count(b"\n\n")
                    chunk = await resp.next_chunk()
            except UpstreamError as exc:
                broke = driver.failed(req, exc, _head_bytes(head) + sent, events)
                if broke is None:  # the flow had closed it already, with no answer to give: its client left
                    return 499
                return await _end_stream(send, rewriter, broke)
            except asyncio.CancelledError:  # the flow cut the stream off (its replica hung): say so as its end
                answer = watch.answer()
                if not watch.cancelled or watch.gone or answer is None:
                    raise
                watch.task.uncancel()
                return await _end_stream(send, rewriter, answer)
            tail = done + take_stream_usage(req, rewriter.flush(), strip)
            end = driver.finished(req, 200)
            metrics.observe_upstream(replica.pool, TIER_NAME[req.served], end - start)
            await send({"type": "http.response.body", "body": tail})
            return 200
        finally:
            resp.release()  # reused if complete; dropped (cancelling the engine's work) if not
