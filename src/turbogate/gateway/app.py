"""The gateway as a raw ASGI app (no framework on the hot path; chosen by measured overhead).

Per request: auth → parse and validate → tier → L1 ``submit`` (maybe queue) → L2 ``pick`` →
upstream (lean keep-alive pool per replica, turbogate/httpclient.py) → tag the answer with the tier served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time

import orjson

from turbogate.asgi import (
    JSON_CT,
    AsgiApp,
    BodyTooLarge,
    Message,
    Receive,
    Scope,
    Send,
    error_body,
    header,
    read_body,
    send_bytes,
    send_error,
    send_json,
)
from turbogate.config import GatewayConfig, load_config
from turbogate.errors import ConfigError
from turbogate.gateway import admin
from turbogate.gateway.metrics import GatewayMetrics
from turbogate.gateway.runtime import PoolRt, ReplicaRt, Runtime, TenantRt, build_runtime, pump
from turbogate.gateway.scrape import health_loop, scrape_all, scrape_loop
from turbogate.gateway.sse import SSERewriter, tag_json_body
from turbogate.httpclient import UpstreamError, UpstreamPool
from turbogate.sched import Admitted, Shed, Ticket, Tier, parse_tier
from turbogate.sched.admission import State

_QUEUED = State.QUEUED

log = logging.getLogger("turbogate.gateway")

#: vLLM's ``priority`` field: lower is served first.
PRIORITY = {Tier.TURBO: 0, Tier.STANDARD: 1, Tier.RELAX: 2}
_TIER_HEADERS = {t: (b"x-turbogate-tier", t.value.encode()) for t in Tier}
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_ENDPOINTS = {
    "/v1/chat/completions": ("chat", "/v1/chat/completions"),
    "/v1/completions": ("completions", "/v1/completions"),
    "/v1/embeddings": ("embeddings", "/v1/embeddings"),
}
_REQUIRED = {"chat": "messages", "completions": "prompt", "embeddings": "input"}


def _timing(l1: float, l2: float, upstream: float) -> tuple[bytes, bytes]:
    return (b"server-timing", b"l1;dur=%.3f, l2;dur=%.3f, upstream;dur=%.3f" % (l1 * 1e3, l2 * 1e3, upstream * 1e3))


def _stream_timing(l1: float, l2: float, ttft: float) -> tuple[bytes, bytes]:
    return (b"server-timing", b"l1;dur=%.3f, l2;dur=%.3f, ttft;dur=%.3f" % (l1 * 1e3, l2 * 1e3, ttft * 1e3))


class _Flight:
    """A request between admission and its answer.

    One sweeper task (``GatewayApp._sweep``) serves all of them instead of two helpers per
    request: it cancels those past their tier deadline (→ 504), and starts a disconnect watcher
    only for requests still running after ``_WATCH_AFTER_S`` (queued ones get it at once).  A
    timer and a watcher task per request were the largest share of the gateway's own CPU per
    request, and a quick request is over before either matters.
    """

    __slots__ = ("born", "deadline", "finished", "gone", "receive", "task", "timed_out", "watcher")

    def __init__(self, task: asyncio.Task[object], receive: Receive, born: float, deadline: float) -> None:
        self.task = task
        self.receive = receive
        self.born = born
        self.deadline = deadline
        self.timed_out = False
        self.finished = False
        self.gone = False
        self.watcher: asyncio.Task[None] | None = None

    def watch(self) -> None:
        if self.watcher is None:
            self.watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        message = await self.receive()
        if message["type"] == "http.disconnect" and not self.finished:
            self.gone = True  # the client left: cancel upstream and free the slot
            self.task.cancel()


_WATCH_AFTER_S = 0.05
_SWEEP_S = 0.02


class GatewayApp(AsgiApp):
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.rt: Runtime = build_runtime(config)
        self.metrics = GatewayMetrics(self.rt)
        self.max_body = config.limits.max_body_bytes
        models = [{"id": m, "object": "model", "created": 0, "owned_by": p.name}
                  for p in self.rt.pools.values() for m in p.models]
        self._models_body = orjson.dumps({"object": "list", "data": models})
        self._started = False
        self._flights: set[_Flight] = set()

    # ---- ASGI entry (AsgiApp) ---------------------------------------------------------------
    async def handle_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        endpoint = _ENDPOINTS.get(path)
        if endpoint is not None:
            if method != "POST":
                await send_error(send, 405, f"{path} takes POST", code="method_not_allowed")
                return
            try:
                await self._proxy(scope, receive, send, endpoint[0], endpoint[1])
            except Exception:  # a bug, not bad input: answer in the OpenAI shape, keep the server up
                log.exception("internal error on %s", path)  # the scope's headers (keys) are not logged
                with contextlib.suppress(Exception):  # fails harmlessly if the answer had started
                    await send_error(send, 500, "internal gateway error", code="internal_error")
        elif path == "/health":
            await send_bytes(send, 200, b'{"status":"ok"}')
        elif path == "/ready":
            ready = all(any(r.state.health.value == "healthy" for r in p.replicas.values())
                        for p in self.rt.pools.values())
            await send_bytes(send, 200 if ready else 503, b'{"ready":true}' if ready else b'{"ready":false}')
        elif path == "/metrics":
            body = self.metrics.render()
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
                (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        elif path == "/v1/models":
            if self._tenant(scope) is None:
                await self._unauthorized(send)
                return
            await send_bytes(send, 200, self._models_body)
        elif path.startswith("/admin/"):
            await admin.handle(self, scope, receive, send)
        else:
            await send_error(send, 404, f"no route {path}", code="not_found")

    async def startup(self) -> None:
        if self._started:
            return
        self._started = True
        for pool in self.rt.pools.values():
            for r in pool.replicas.values():
                headers = None
                if r.api_key_env:
                    key = os.environ.get(r.api_key_env)
                    if not key:
                        raise ConfigError(f"replica {r.state.id}: environment variable {r.api_key_env} is not set")
                    headers = {"Authorization": f"Bearer {key}"}
                r.client = UpstreamPool(r.url, self.config.limits.upstream_connect_timeout_s, headers)
        with contextlib.suppress(Exception):  # a replica down at start is ejected, not fatal
            await asyncio.wait_for(scrape_all(self.rt), self.config.scrape.timeout_s + 0.5)
        loop = asyncio.get_running_loop()
        self.rt.tasks = [loop.create_task(scrape_loop(self.rt)), loop.create_task(health_loop(self.rt)),
                         loop.create_task(self._sweep())]

    async def _sweep(self) -> None:
        """Deadlines and disconnect watchers for every request in flight (see ``_Flight``)."""
        while True:
            await asyncio.sleep(_SWEEP_S)
            now = time.perf_counter()
            watch_before = now - _WATCH_AFTER_S
            for flight in list(self._flights):
                if flight.deadline < now and not flight.timed_out:
                    flight.timed_out = True
                    flight.task.cancel()
                elif flight.watcher is None and flight.born < watch_before:
                    flight.watch()

    async def shutdown(self) -> None:
        for task in self.rt.tasks:
            task.cancel()
        for pool in self.rt.pools.values():
            for r in pool.replicas.values():
                if r.client is not None:
                    r.client.close()

    # ---- edge ------------------------------------------------------------------------------
    def _tenant(self, scope: Scope) -> TenantRt | None:
        auth = header(scope, b"authorization")
        if not auth or auth[:7].lower() != b"bearer ":
            return None
        return self.rt.tenant_for_key(auth[7:].strip())

    async def _unauthorized(self, send: Send) -> None:
        await send_error(send, 401, "Incorrect or missing API key (send Authorization: Bearer <key>)",
                         code="invalid_api_key")

    async def _bad(self, send: Send, tenant: TenantRt, status: int, message: str, param: str | None,
                   code: str) -> None:
        self.metrics.count(tenant.label, "-", "-", status)
        await send_error(send, status, message, param=param, code=code)

    async def _proxy(self, scope: Scope, receive: Receive, send: Send, kind: str, upstream_path: str) -> None:
        arrival = time.perf_counter()
        tenant = self._tenant(scope)
        if tenant is None:
            self.metrics.count("-", "-", "-", 401)
            await self._unauthorized(send)
            return
        length = header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            await self._bad(send, tenant, 413, f"request body is {int(length)} bytes, over the limit of "
                            f"{self.max_body}", None, "body_too_large")
            return
        try:
            body = await read_body(receive, self.max_body)
        except BodyTooLarge:
            await self._bad(send, tenant, 413, f"request body is over the limit of {self.max_body} bytes", None,
                            "body_too_large")
            return
        if body is None:
            return
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            await self._bad(send, tenant, 400, f"request body is not valid JSON: {exc}", None, "invalid_json")
            return
        if not isinstance(obj, dict):
            await self._bad(send, tenant, 400, "request body must be a JSON object", None, "invalid_json")
            return
        model = obj.get("model")
        if not isinstance(model, str) or not model:
            await self._bad(send, tenant, 400, "you must provide a model parameter (a string)", "model",
                            "missing_required_parameter")
            return
        pool = self.rt.pool_of_model.get(model)
        if pool is None:
            await self._bad(send, tenant, 404, f"The model `{model}` does not exist or you do not have access "
                            "to it", "model", "model_not_found")
            return
        field = _REQUIRED[kind]
        value = obj.get(field)
        if value is None or (kind == "chat" and (not isinstance(value, list) or not value)):
            await self._bad(send, tenant, 400, f"'{field}' is required" + (" (a non-empty list)" if kind == "chat"
                            else ""), field, "missing_required_parameter")
            return
        stream = obj.get("stream", False)
        if not isinstance(stream, bool) or (stream and kind == "embeddings"):
            await self._bad(send, tenant, 400, "'stream' must be true or false (and false for embeddings)",
                            "stream", "invalid_value")
            return
        asked_word = obj.get("service_tier")
        if asked_word is not None:
            asked = parse_tier(asked_word)
            if asked is None:
                await self._bad(send, tenant, 400, f"unknown service_tier {asked_word!r}; use priority/turbo, "
                                "default/auto/standard or flex/relax", "service_tier", "invalid_value")
                return
        else:
            word = header(scope, b"x-turbogate-tier")
            if word is not None:
                asked = parse_tier(word.decode("latin-1"))
                if asked is None:
                    await self._bad(send, tenant, 400, "unknown X-Turbogate-Tier header value", "X-Turbogate-Tier",
                                    "invalid_value")
                    return
            else:
                asked = tenant.default_tier
        served = self.rt.served_tier(tenant, asked)
        if "service_tier" in obj or pool.priority_field:
            obj.pop("service_tier", None)
            if pool.priority_field:
                obj["priority"] = PRIORITY[served]
            body = orjson.dumps(obj)
        max_tokens = obj.get("max_tokens") or obj.get("max_completion_tokens") or 256
        cost = float(max_tokens if isinstance(max_tokens, int) else 256) + len(body) / 4
        await self._serve(receive, send, tenant, pool, asked, served, body, stream, cost, arrival, upstream_path)

    # ---- L1 → L2 → upstream ----------------------------------------------------------------
    async def _serve(self, receive: Receive, send: Send, tenant: TenantRt, pool: PoolRt, asked: Tier, served: Tier,
                     body: bytes, stream: bool, cost: float, arrival: float, upstream_path: str) -> None:
        rt = self.rt
        metrics = self.metrics
        admission = pool.admission
        now = time.perf_counter()
        ticket = Ticket(tenant.name, served, now, cost)
        slots = rt.picker.slots(pool.name, now)
        decision = admission.submit(ticket, now, slots)
        if not isinstance(decision, Admitted):
            await self._shed(send, tenant, asked, served, decision)
            return
        pump(pool, rt.picker, now, slots)
        status = 499
        task = asyncio.current_task()
        assert task is not None
        flight = _Flight(task, receive, now, math.inf)
        self._flights.add(flight)
        orig_send = send

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                flight.finished = True  # from here a disconnect is the normal end, not the client leaving
            await orig_send(message)

        policy = rt.policies[served]
        ok = False
        try:
            if ticket.state is _QUEUED:
                flight.watch()  # a queued request may wait long: notice at once if its client leaves
                waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                ticket.payload = waiter
                limit = min(policy.queue_budget_s, policy.deadline_s) - (time.perf_counter() - arrival)
                try:
                    await asyncio.wait_for(waiter, max(limit, 0.0))
                except TimeoutError:
                    if ticket.state is _QUEUED:
                        shed = admission.timed_out(ticket, time.perf_counter())
                        status = shed.status
                        await self._shed(tracked_send, tenant, asked, served, shed)
                        return
            l1 = time.perf_counter() - arrival
            metrics.observe_queue(served, l1)
            flight.deadline = arrival + policy.deadline_s
            status, ok = await self._upstream(tracked_send, pool, served, body, stream, upstream_path, l1, flight)
        except asyncio.CancelledError:
            if not flight.gone:
                raise
            task.uncancel()
            status = 499
        finally:
            flight.finished = True
            self._flights.discard(flight)
            if flight.watcher is not None:
                flight.watcher.cancel()
            end = time.perf_counter()
            admission.on_complete(ticket, end, count_service=ok)
            pump(pool, rt.picker, end)
            metrics.count(tenant.label, asked, served, status)

    async def _shed(self, send: Send, tenant: TenantRt, asked: Tier, served: Tier, shed: Shed) -> None:
        self.metrics.shed.labels(shed.reason, served.value).inc()
        self.metrics.count(tenant.label, asked.value, served.value, shed.status)
        await send_error(send, shed.status, shed.message, code=shed.reason,
                         headers=[(b"retry-after", str(shed.retry_after_s).encode()), _TIER_HEADERS[served]])

    async def _upstream(self, send: Send, pool: PoolRt, served: Tier, body: bytes, stream: bool, path: str,
                        l1: float, flight: _Flight) -> tuple[int, bool]:
        """Send the request to a replica (retrying once elsewhere if it failed before any byte);
        returns (HTTP status sent to the client, whether the replica answered)."""
        picker = self.rt.picker
        tried: list[str] = []
        for attempt in range(2):
            t_l2 = time.perf_counter()
            replica_state = picker.pick(pool.name, t_l2, exclude=tried)
            if replica_state is None and tried:
                await send_error(send, 502, "the engine replica failed before answering and no other could take "
                                 "the retry", code="upstream_unavailable", headers=[_TIER_HEADERS[served]])
                return 502, False
            if replica_state is None:
                await send_error(send, 503, f"no replica of pool {pool.name!r} can take the request now",
                                 code="no_replica", headers=[(b"retry-after", b"1"), _TIER_HEADERS[served]])
                return 503, False
            replica = pool.replicas[replica_state.id]
            picker.on_dispatch(replica_state)
            start = time.perf_counter()
            l2 = start - t_l2
            try:
                if stream:
                    return await self._stream(send, pool, replica, served, body, path, l1, l2, start, flight)
                return await self._unary(send, pool, replica, served, body, path, l1, l2, start, flight)
            except UpstreamError as exc:
                # Only a refused connection ejects at once; a reset counts toward eject_after_failures.
                picker.on_failure(replica_state, time.perf_counter(), hard=exc.connect_failed)
                if not exc.before_response:  # bytes had come: no retry (a broken stream never gets here)
                    await send_error(send, 502, f"the engine connection broke mid-answer: {exc}",
                                     code="upstream_error", headers=[_TIER_HEADERS[served]])
                    return 502, False
                tried.append(replica_state.id)
                log.info("upstream %s failed before any byte: %s", replica_state.id, exc)
                if attempt == 0:
                    self.metrics.retries.labels(pool.name).inc()
                    continue
                await send_error(send, 502, "the engine replicas could not be reached", code="upstream_unavailable",
                                 headers=[_TIER_HEADERS[served]])
                return 502, False
            except asyncio.CancelledError:
                picker.on_release(replica_state)
                if not flight.timed_out:
                    raise
                flight.task.uncancel()
                await send_error(send, 504, f"the {served.value} tier deadline passed before the engine answered",
                                 code="deadline_exceeded", headers=[_TIER_HEADERS[served]])
                return 504, False
            except BaseException:
                picker.on_release(replica_state)
                raise
        return 502, False  # not reached

    async def _unary(self, send: Send, pool: PoolRt, replica: ReplicaRt, served: Tier, body: bytes, path: str,
                     l1: float, l2: float, start: float, flight: _Flight) -> tuple[int, bool]:
        client = replica.client
        assert client is not None
        resp = await client.request(b"POST", path, body)
        try:
            data = await resp.read()
        finally:
            resp.release()  # reused if complete; dropped (cancelling the engine's work) if not
        flight.deadline = math.inf  # answered in time; from here on only the client can stop us
        status = resp.status
        end = time.perf_counter()
        self._account(replica, status, end - start)
        self.metrics.observe_upstream(pool.name, served, end - start)
        ctype = resp.content_type
        if status == 200 and ctype.startswith(b"application/json"):
            data = tag_json_body(data, served)
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", ctype), (b"content-length", str(len(data)).encode()), _TIER_HEADERS[served],
            _timing(l1, l2, end - start)]})
        await send({"type": "http.response.body", "body": data})
        return status, status < 500

    def _account(self, replica: ReplicaRt, status: int, seconds: float) -> None:
        if status in (502, 503, 504):
            self.rt.picker.on_failure(replica.state, time.perf_counter(), hard=False)
        else:
            self.rt.picker.on_success(replica.state, seconds)

    async def _stream(self, send: Send, pool: PoolRt, replica: ReplicaRt, served: Tier, body: bytes, path: str,
                      l1: float, l2: float, start: float, flight: _Flight) -> tuple[int, bool]:
        client = replica.client
        assert client is not None
        tier_header = _TIER_HEADERS[served]
        resp = await client.request(b"POST", path, body)
        try:
            if resp.status != 200:
                data = await resp.read()
                flight.deadline = math.inf
                end = time.perf_counter()
                self._account(replica, resp.status, end - start)
                await send({"type": "http.response.start", "status": resp.status, "headers": [
                    (b"content-type", resp.content_type), (b"content-length", str(len(data)).encode()), tier_header,
                    _timing(l1, l2, end - start)]})
                await send({"type": "http.response.body", "body": data})
                return resp.status, resp.status < 500
            try:
                first = await resp.next_chunk()
            except UpstreamError as exc:  # nothing reached the client yet: as if it failed before any byte
                raise UpstreamError(str(exc), True) from None
            flight.deadline = math.inf  # the deadline covers the first token; the rest may take its time
            ttft = time.perf_counter() - start
            self.metrics.observe_ttft(pool.name, served, ttft)
            # Headers wait for the first chunk, so Server-Timing can carry ttft; total upstream
            # time of a stream is not known at header time (see docs/gateway.md).
            await send({"type": "http.response.start", "status": 200,
                        "headers": [*_SSE_HEADERS, tier_header, _stream_timing(l1, l2, ttft)]})
            rewriter = SSERewriter(served.value)
            chunk = first
            try:
                while chunk:
                    out = rewriter.feed(chunk)
                    if out:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                    chunk = await resp.next_chunk()
            except UpstreamError as exc:
                self.rt.picker.on_failure(replica.state, time.perf_counter(), hard=False)
                err = error_body(502, f"the engine stream broke: {exc}", code="upstream_error")
                await send({"type": "http.response.body", "body": rewriter.flush() + b"data: " + err + b"\n\n"})
                return 502, False
        finally:
            resp.release()
        end = time.perf_counter()
        self._account(replica, 200, end - start)
        self.metrics.observe_upstream(pool.name, served, end - start)
        await send({"type": "http.response.body", "body": rewriter.flush()})
        return 200, True


def create_app(config: GatewayConfig) -> GatewayApp:
    return GatewayApp(config)


def app_from_env() -> GatewayApp:
    """Factory for ``uvicorn --factory`` workers: the config path comes from TURBOGATE_CONFIG."""
    return GatewayApp(load_config(os.environ["TURBOGATE_CONFIG"]))


__all__ = ["JSON_CT", "GatewayApp", "app_from_env", "create_app", "send_json"]
