"""The gateway's edge as a raw ASGI app (no framework on the hot path; chosen by measured
overhead): routes, auth, body parsing and validation.  Every decision about a request — its
tier, admission, replica, retry, deadline, shedding — is the pure flow's (sched/flow.py); this
module and its neighbours only move bytes (driver.py carries out the flow's actions, proxy.py
makes the upstream calls, scrape.py feeds it engine metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
    header,
    read_body,
    send_bytes,
    send_error,
    send_json,
)
from turbogate.config import GatewayConfig, load_config
from turbogate.errors import ConfigError
from turbogate.gateway import admin, leases, usage_api
from turbogate.gateway.coalesce import Coalescing
from turbogate.gateway.driver import FlowDriver, Handle
from turbogate.gateway.jobs import JobsApi
from turbogate.gateway.lease_share import SharedLeases
from turbogate.gateway.marking import marked_pools, tier_tos
from turbogate.gateway.metering import Metering
from turbogate.gateway.metrics import GatewayMetrics
from turbogate.gateway.metrics_port import MetricsServer, serve_metrics
from turbogate.gateway.openapi import openapi_document
from turbogate.gateway.proxy import attempt
from turbogate.gateway.regions import (
    SESSION_HEADER,
    BadHeader,
    ClientRegions,
    measure_rtt,
    pool_headers,
    session_of,
    warm_up,
)
from turbogate.gateway.runtime import Runtime, TenantRt, build_runtime
from turbogate.gateway.scrape import probe_once, scrape_all, scrape_loop, scrape_once
from turbogate.gateway.tracing import install as install_tracing
from turbogate.gateway.watch import Watch, sweep
from turbogate.httpclient import UpstreamPool
from turbogate.sched import FlowRequest, Health, Replica, Respond, Tier
from turbogate.sched.tiers import TIER_NAME

log = logging.getLogger("turbogate.gateway")

#: ``service_tier`` words in answers: turbogate's own, or OpenAI's (config: service_tier_names).
TIER_WORDS = {
    "turbogate": {t: t.value for t in Tier},
    "openai": {Tier.TURBO: "priority", Tier.STANDARD: "default", Tier.RELAX: "flex"},
}
_TIER_HEADERS = {t: (b"x-turbogate-tier", t.value.encode()) for t in Tier}
_DOWNGRADE = b"x-turbogate-downgrade"
_REQUEST_ID = b"x-turbogate-request-id"  # the id of the request's usage record (docs/metering.md)
_ENDPOINTS = {
    "/v1/chat/completions": ("chat", "/v1/chat/completions"),
    "/v1/completions": ("completions", "/v1/completions"),
    "/v1/embeddings": ("embeddings", "/v1/embeddings"),
}
_REQUIRED = {"chat": "messages", "completions": "prompt", "embeddings": "input"}
_GET_ROUTES = frozenset({"/health", "/ready", "/metrics", "/v1/models", "/openapi.json"})
_MAX_DEPTH = 254  # orjson's encoder limit: a body re-encoded (service_tier, priority) may nest no deeper
class GatewayApp(AsgiApp):
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.rt: Runtime = build_runtime(config)
        self.driver = FlowDriver(self.rt.flow, self._probe, measure_rtt=self._measure_rtt, warm_up=self._warm_up)
        self.client_regions = ClientRegions(config.regions)  # L3's I/O side (gateway/regions.py)
        self.pool_headers = pool_headers(config)
        self.metrics = GatewayMetrics(self.rt)
        self.max_body = config.limits.max_body_bytes
        self.tier_words = TIER_WORDS[config.service_tier_names]
        first_pool: dict[str, str] = {}  # a model may be served by several pools (L3): listed once
        for p in config.pools:
            for m in p.models:
                first_pool.setdefault(m, p.name)
        models = [{"id": m, "object": "model", "created": 0, "owned_by": p} for m, p in first_pool.items()]
        self._models_body = orjson.dumps({"object": "list", "data": models})
        self._openapi_body = openapi_document(config)
        self._started = False
        self.watches: set[Watch] = set()
        self.metrics_token = config.metrics.token_sha256
        self.metrics_port = config.metrics.port
        self._metrics_server: MetricsServer | None = None
        self.meter = Metering(self)  # usage records, budgets, shared switches and limits (docs/metering.md)
        self.lease_share = SharedLeases(self.rt.flow.leases, self.meter.store)  # Turbo leases via the store
        # Identical deterministic requests share one upstream call on the routes config names (gateway/coalesce.py).
        self.coalescing = Coalescing(config.coalesce, self.metrics.registry) if config.coalesce.routes else None
        self.jobs = JobsApi(self)  # L4 job graphs (gateway/jobs.py)
        install_tracing(self)  # OpenTelemetry hook (issue 13): returns at once unless TURBOGATE_OTEL is on

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
        elif usage_api.handles(path):
            await usage_api.handle(self, scope, receive, send)
        elif path.startswith((leases.PREFIX, "/v1/jobs")):  # Turbo leases, L4 job graphs
            try:
                await (self.jobs.handle if path.startswith("/v1/jobs") else self._leases)(scope, receive, send)
            except BodyTooLarge:
                await send_error(send, 413, f"request body is over the limit of {self.max_body} bytes",
                                 code="body_too_large")
        elif path.startswith("/admin/"):
            try:
                await admin.handle(self, scope, receive, send)
            except BodyTooLarge:
                await send_error(send, 413, f"admin request body is over the limit of {admin.MAX_BODY} bytes",
                                 code="body_too_large")
        elif path in _GET_ROUTES and not (path == "/metrics" and self.metrics_port is not None):
            if method not in ("GET", "HEAD"):
                await send_error(send, 405, f"{path} takes GET", code="method_not_allowed",
                                 headers=[(b"allow", b"GET, HEAD")])
                return
            await self._get(scope, send, path)
        else:
            await send_error(send, 404, f"no route {path}", code="not_found")

    async def _leases(self, scope: Scope, receive: Receive, send: Send) -> None:
        await leases.handle(self, scope, receive, send)

    async def handle_websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        await leases.handle_ws(self, scope, receive, send)  # the only WebSocket route: lease heartbeats

    async def _get(self, scope: Scope, send: Send, path: str) -> None:
        if path == "/health":
            await send_bytes(send, 200, b'{"status":"ok"}')
        elif path == "/ready":
            picker = self.rt.flow.picker  # ready while every model has a healthy pool (L3 fails over)
            ready = all(any(picker.healthy(p) > 0 for p in pools) for pools in self.rt.flow.pools_of_model.values())
            body = b'{"ready":true}' if ready else b'{"ready":false}'
            if self.meter.store.degraded:  # still serving, within local limits, usage buffered on disk
                body = body[:-1] + b',"status":"degraded","store":"unreachable"}'
            await send_bytes(send, 200 if ready else 503, body)
        elif path == "/metrics":
            await serve_metrics(self, scope, send)
        elif path == "/openapi.json":
            await send_bytes(send, 200, self._openapi_body)
        elif self._tenant(scope) is None:  # /v1/models
            await self._unauthorized(send)
        else:
            await send_bytes(send, 200, self._models_body)

    async def startup(self) -> None:
        if self._started:
            return
        self._started = True
        marks = tier_tos(self.config)
        for r in self.rt.replicas.values():
            headers = None
            if r.api_key_env:
                key = os.environ.get(r.api_key_env)
                if not key:
                    raise ConfigError(f"replica {r.state.id}: environment variable {r.api_key_env} is not set")
                headers = {"Authorization": f"Bearer {key}"}
            r.client = UpstreamPool(r.url, self.config.limits.upstream_connect_timeout_s, headers)
            r.tier_clients = marked_pools(r.url, self.config.limits.upstream_connect_timeout_s, headers, marks)
        cfg = self.config
        for p in cfg.pools:
            log.info("pool %s: models %s, %d replicas (%s)", p.name, ", ".join(p.models), len(p.replicas),
                     ", ".join(r.url for r in p.replicas))
        log.info("tiers: %s", ", ".join(f"{name} ({'on' if t.enabled else 'off'}, queue budget {t.queue_budget_s:g}s,"
                                        f" deadline {t.deadline_s:g}s)" for name, t in cfg.tiers.items()))
        with contextlib.suppress(Exception):  # a replica down at start is ejected, not fatal
            await asyncio.wait_for(scrape_all(self.rt, self.driver), cfg.scrape.timeout_s + 0.5)
        for pool in self.rt.flow.picker.pools():
            if self.rt.flow.picker.healthy(pool) == 0:
                log.warning("pool %s has no healthy replica at start", pool)
        if self.metrics_port is not None:
            self._metrics_server = MetricsServer(self, cfg.metrics.host or cfg.listen.host, self.metrics_port)
            await self._metrics_server.start()
        await self.meter.start()
        loop = asyncio.get_running_loop()
        self.rt.tasks = [loop.create_task(scrape_loop(self.rt, self.driver)), loop.create_task(sweep(self))]
        self.driver.run(())  # arm the flow's timer now: warm-ups and round-trip probes are due at start

    async def _probe(self, replica: Replica) -> bool:
        io = self.rt.replicas[replica.id]
        ok = await probe_once(self.rt, io)
        if ok and replica.health is Health.EJECTED and replica.scraped:
            # Fresh metrics with the comeback, so L2 need not treat it as stale for a second.
            result = await scrape_once(self.rt, io)
            self.driver.run(self.rt.flow.scraped(replica.id, result, time.perf_counter()))
        return ok

    async def _measure_rtt(self, replica: Replica) -> float | None:
        return await measure_rtt(self.rt, self.rt.replicas[replica.id])

    async def _warm_up(self, replica: Replica, model: str) -> bool:
        return await warm_up(self.rt, self.rt.replicas[replica.id], model)

    async def shutdown(self) -> None:
        if self._metrics_server is not None:
            await self._metrics_server.stop()
        for task in self.rt.tasks:
            task.cancel()
        self.driver.close()
        await self.meter.stop()
        if self.coalescing is not None:
            self.coalescing.close()
        for r in self.rt.replicas.values():
            for client in r.clients():
                client.close()

    # ---- edge ------------------------------------------------------------------------------
    def _tenant(self, scope: Scope) -> TenantRt | None:
        return self._tenant_of(header(scope, b"authorization"))

    def _tenant_of(self, auth: bytes | None) -> TenantRt | None:
        if not auth or auth[:7].lower() != b"bearer ":
            return None
        return self.rt.tenant_for_key(auth[7:].strip())

    async def _unauthorized(self, send: Send) -> None:
        await send_error(send, 401, "Incorrect or missing API key (send Authorization: Bearer <key>)",
                         code="invalid_api_key")

    async def _bad(self, send: Send, tenant: TenantRt, status: int, message: str, param: str | None,
                   code: str) -> None:
        self.metrics.count(tenant.label, "-", "-", status)
        self.meter.record_edge(tenant.name, status, "-", "-", time.perf_counter())
        await send_error(send, status, message, param=param, code=code)

    async def _proxy(self, scope: Scope, receive: Receive, send: Send, kind: str, upstream_path: str) -> None:
        arrival = time.perf_counter()
        # Every header this route reads, in one pass (the first of a repeated name, as header() does).
        headers: dict[bytes, bytes] = dict(reversed(scope["headers"]))
        tenant = self._tenant_of(headers.get(b"authorization"))
        if tenant is None:
            self.metrics.count("-", "-", "-", 401)
            await self._unauthorized(send)
            return
        length = headers.get(b"content-length")
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
        tier_header = headers.get(b"x-turbogate-tier")
        try:
            client_region = self.client_regions.region_of(headers.get(self.client_regions.header), scope)
            session = session_of(headers.get(SESSION_HEADER))
        except BadHeader as exc:
            await self._bad(send, tenant, 400, str(exc), exc.name, "invalid_value")
            return
        tokens_field = "max_tokens" if obj.get("max_tokens") is not None else "max_completion_tokens"
        lease_id = leases.lease_of(headers.get(leases.LEASE_HEADER))
        if lease_id is not None:  # the lease may have been granted or kept alive through another process
            await self.lease_share.refresh(lease_id, arrival)
        req = self.rt.flow.open(
            tenant=tenant.name, model=model, tier_body=obj.get("service_tier"),
            tier_header=None if tier_header is None else tier_header.decode("latin-1"),
            max_tokens=obj.get(tokens_field), max_tokens_field=tokens_field, prompt_bytes=len(body),
            stream=stream, now=arrival, lease=lease_id, client_region=client_region,
            session=session)
        if isinstance(req, Respond):
            await self._bad(send, tenant, req.status, req.message, req.param, req.code)
            return
        if self.meter.ask_stream_usage(obj, req) or "service_tier" in obj or req.priority is not None:
            obj.pop("service_tier", None)
            if req.priority is not None:
                obj["priority"] = req.priority
            try:
                body = orjson.dumps(obj)
            except orjson.JSONEncodeError:  # orjson decodes 1,024 levels of nesting but encodes only 254
                await self._bad(send, tenant, 400, f"request body nests deeper than {_MAX_DEPTH} levels", None,
                                "invalid_json")
                return
        if self.coalescing is not None:  # an identical deterministic request may already be under way
            decision = self.coalescing.decide(upstream_path, tenant, req, self.meter.key_body(obj, req))
            if decision is not None:
                await self.coalescing.serve(self, decision, send, receive, tenant, req, body, upstream_path)
                return
        await self._serve(receive, send, tenant, req, body, upstream_path)

    # ---- the request's life, as the flow directs it -----------------------------------------
    async def _serve(self, receive: Receive, send: Send, tenant: TenantRt, req: FlowRequest, body: bytes,
                     upstream_path: str, count: bool = True) -> None:
        """Serve ``req`` as the flow directs.  ``count``: False for a coalesced group's shared call,
        whose members are counted one by one (gateway/coalesce.py)."""
        task = asyncio.current_task()
        assert task is not None
        handle = Handle(task)
        req.handle = handle
        watch = Watch(receive, req, handle, req.arrival)
        orig_send = send

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                watch.finished = True  # from here a disconnect is the normal end, not the client leaving
                await self.meter.record(req)  # durable before the client has the whole answer
            await orig_send(message)

        tier_headers = [_TIER_HEADERS[req.served], (_REQUEST_ID, self.meter.record_id(req).encode()),
                        *self.pool_headers[req.pool]]
        if req.downgrade is not None:  # the client asked for more than it got: say why
            tier_headers.append((_DOWNGRADE, req.downgrade.encode()))
        word = self.tier_words[req.served]
        status = 499
        observed_queue = False
        self.watches.add(watch)
        try:
            refusal = await self.meter.admit(req) if req.tenant in self.meter.limits else None
            if refusal is not None:  # a global tenant limit, across every gateway sharing the store
                handle.respond = self.rt.flow.refuse(req, 429, refusal.code, refusal.message, time.perf_counter(),
                                                     refusal.retry_after_s)
            else:
                self.driver.run(self.rt.flow.arrive(req, req.arrival))
            while True:
                if handle.respond is not None:
                    status = await self._respond(tracked_send, req, handle.respond)
                    break
                replica = handle.replica
                if replica is None:
                    watch.start(self)  # a queued request may wait long: notice at once if its client leaves
                    await handle.next_step()
                    continue
                handle.replica = None
                if handle.retry:
                    self.metrics.retries.labels(replica.pool).inc()
                elif not observed_queue:
                    observed_queue = True
                    self.metrics.observe_queue(TIER_NAME[req.served], (req.dispatched_at or req.arrival) - req.arrival)
                sent = await attempt(self, req, replica, tracked_send, body, upstream_path, word, tier_headers)
                if sent is not None:
                    status = sent
                    break
        except asyncio.CancelledError:
            if watch.gone:
                task.uncancel()
                status = 499
            elif handle.cancelled and handle.respond is not None:  # the flow's deadline: answer its 504
                task.uncancel()
                status = await self._respond(tracked_send, req, handle.respond)
            else:
                raise
        finally:
            watch.finished = True
            self.watches.discard(watch)
            if watch.task is not None:
                watch.task.cancel()
            if not req.done:  # ended here without the flow knowing (a bug or shutdown): free its place
                self.driver.run(self.rt.flow.client_gone(req, time.perf_counter()))
            self.meter.done(req)
            if count:
                self.metrics.count(tenant.label, TIER_NAME[req.asked], TIER_NAME[req.served], status)

    async def _respond(self, send: Send, req: FlowRequest, respond: Respond) -> int:
        headers = [_TIER_HEADERS[req.served], (_REQUEST_ID, self.meter.record_id(req).encode()),
                   *self.pool_headers[req.pool]]
        if req.downgrade is not None:
            headers.append((_DOWNGRADE, req.downgrade.encode()))
        if respond.retry_after_s is not None:
            headers.append((b"retry-after", str(respond.retry_after_s).encode()))
            self.metrics.shed.labels(respond.code, TIER_NAME[req.served]).inc()
        await send_error(send, respond.status, respond.message, param=respond.param, code=respond.code,
                         headers=headers)
        return respond.status


def create_app(config: GatewayConfig) -> GatewayApp:
    return GatewayApp(config)


def app_from_env() -> GatewayApp:
    """Factory for ``uvicorn --factory`` workers: the config path comes from TURBOGATE_CONFIG."""
    from turbogate.gateway.cli import configure_logging
    from turbogate.gateway.gcpolicy import settle_after_startup

    configure_logging(os.environ.get("TURBOGATE_LOG_LEVEL", "warning"))
    from turbogate.gateway.cli import with_knee_from

    knee_from = [x for x in os.environ.get("TURBOGATE_KNEE_FROM", "").split("\n") if x]
    app = GatewayApp(with_knee_from(load_config(os.environ["TURBOGATE_CONFIG"]), knee_from))
    settle_after_startup()  # start-up state out of the GC's sight (gateway/gcpolicy.py)
    return app


__all__ = ["JSON_CT", "GatewayApp", "app_from_env", "create_app", "send_json"]
