"""The gateway as a raw ASGI app (no framework on the hot path; chosen by measured overhead):
its parts wired together, its routes, and its start and stop.  Every decision about a request —
its tier, admission, replica, retry, deadline, shedding — is the pure flow's (sched/flow.py);
the gateway's modules only move bytes: edge.py checks a proxied request, serve.py carries it
through the flow's steps (driver.py carries out the flow's actions), proxy.py makes the
upstream calls, scrape.py feeds the flow engine metrics.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

import orjson

from turbogate import __version__, build
from turbogate.asgi import (
    JSON_CT,
    AsgiApp,
    Receive,
    Scope,
    Send,
    header,
    send_error,
    send_json,
)
from turbogate.config import GatewayConfig, load_config
from turbogate.errors import ConfigError
from turbogate.gateway import edge, leases, routes, serve
from turbogate.gateway.busypoll import IdlePoll, describe, idle_poll
from turbogate.gateway.coalesce import Coalescing
from turbogate.gateway.driver import FlowDriver
from turbogate.gateway.jobs import JobsApi
from turbogate.gateway.learned_share import share_loop, start_learned
from turbogate.gateway.lease_share import SharedLeases
from turbogate.gateway.marking import marked_pools, tier_tos
from turbogate.gateway.metering import Metering
from turbogate.gateway.metrics import GatewayMetrics
from turbogate.gateway.metrics_port import MetricsServer
from turbogate.gateway.openapi import openapi_document
from turbogate.gateway.regions import ClientRegions, measure_rtt, pool_headers, warm_up
from turbogate.gateway.runtime import Runtime, TenantRt, build_runtime
from turbogate.gateway.scrape import probe_once, scrape_all, scrape_loop, scrape_once
from turbogate.gateway.tracing import install as install_tracing
from turbogate.gateway.watch import Watch, sweep
from turbogate.httpclient import UpstreamPool
from turbogate.sched import Health, Replica, Tier
from turbogate.store.base import StoreUnavailable
from turbogate.store.redis_store import RedisStore

log = logging.getLogger("turbogate.gateway")

#: ``service_tier`` words in answers: turbogate's own, or OpenAI's (config: service_tier_names).
TIER_WORDS = {
    "turbogate": {t: t.value for t in Tier},
    "openai": {Tier.TURBO: "priority", Tier.STANDARD: "default", Tier.RELAX: "flex"},
}


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
        self.models_body = orjson.dumps({"object": "list", "data": models})
        self.openapi_body = openapi_document(config)
        self._started = False
        self.loop: asyncio.AbstractEventLoop | None = None  # the event loop it started on
        self.idle_poll: IdlePoll | None = None  # its poller, made at start-up on that loop
        self.watches: set[Watch] = set()
        self.metrics_token = config.metrics.token_sha256
        self.metrics_port = config.metrics.port
        self._metrics_server: MetricsServer | None = None
        self.meter = Metering(self)  # usage records, budgets, shared switches and limits (docs/metering.md)
        self.lease_share = SharedLeases(self.rt.flow.leases, self.meter.store)  # Turbo leases via the store
        self.ws_connections = leases.WsConnections(config.limits)  # lease WebSockets against their caps
        # Identical deterministic requests share one upstream call on the routes config names (gateway/coalesce.py).
        self.coalescing = Coalescing(config.coalesce, self.metrics.registry) if config.coalesce.routes else None
        self.jobs = JobsApi(self)  # L4 job graphs (gateway/jobs.py)
        install_tracing(self)  # OpenTelemetry hook (issue 13): returns at once unless TURBOGATE_OTEL is on

    # ---- ASGI entry (AsgiApp): the routes (gateway/routes.py; WebSockets are lease heartbeats) ---
    handle_http = routes.handle_http

    async def handle_websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        await leases.handle_ws(self, scope, receive, send)  # the only WebSocket route: lease heartbeats

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
        # Poll instead of sleeping where the next event is due sooner than a wake-up costs
        # (gateway/busypoll.py): a client's bytes (gateway/guard.py) and an engine's are its events.
        poll = self.idle_poll = idle_poll(asyncio.get_running_loop(), cfg.listen.busy_poll_us,
                                          cfg.listen.idle_poll_max_us)
        if poll is not None:
            for r in self.rt.replicas.values():
                for client in r.clients():
                    client.on_data = poll.kick
            self.metrics.watch_idle_poll(poll)
        log.info("turbogate %s, request path %s, %s", __version__, build(), describe(poll))
        for p in cfg.pools:
            log.info("pool %s: models %s, %d replicas (%s)", p.name, ", ".join(p.models), len(p.replicas),
                     ", ".join(r.url for r in p.replicas))
        log.info("tiers: %s", ", ".join(f"{name} ({'on' if t.enabled else 'off'}, queue budget {t.queue_budget_s:g}s,"
                                        f" deadline {t.deadline_s:g}s)" for name, t in cfg.tiers.items()))
        if cfg.metrics.token_sha256 is None and cfg.metrics.port is None:
            log.warning("/metrics is public on the main port and names every tenant and its traffic; set "
                        "metrics.token_sha256 (a bearer token) or metrics.port (a port of its own) in the config")
        with contextlib.suppress(Exception):  # a replica down at start is ejected, not fatal
            await asyncio.wait_for(scrape_all(self.rt, self.driver), cfg.scrape.timeout_s + 0.5)
        for pool in self.rt.flow.picker.pools():
            if self.rt.flow.picker.healthy(pool) == 0:
                log.warning("pool %s has no healthy replica at start", pool)
        if self.metrics_port is not None:
            self._metrics_server = MetricsServer(self, cfg.metrics.host or cfg.listen.host, self.metrics_port)
            await self._metrics_server.start()
        await self.meter.start()
        await start_learned(self.rt.flow.picker, self.meter.store)  # a restart is not a cold start
        primary = self.meter.store.primary
        if isinstance(primary, RedisStore):  # usage records must outlive a Redis restart (docs/metering.md)
            with contextlib.suppress(StoreUnavailable):  # unreachable: the store's own warnings say so
                why = await primary.durability()
                if why is not None:
                    log.warning("Redis store %s %s", primary.url, why)
        loop = self.loop = asyncio.get_running_loop()
        self.rt.tasks = [loop.create_task(scrape_loop(self.rt, self.driver)), loop.create_task(sweep(self)),
                         loop.create_task(share_loop(self.rt.flow.picker, self.meter.store))]
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
        return self.rt.tenant_for_auth(header(scope, b"authorization"))

    async def _unauthorized(self, send: Send) -> None:
        await send_error(send, 401, "Incorrect or missing API key (send Authorization: Bearer <key>)",
                         code="invalid_api_key")

    # The proxy routes: the edge's checks (gateway/edge.py), then the request's life as the flow
    # directs it (gateway/serve.py).  Attributes, so tracing (gateway/tracing.py) can wrap them.
    _proxy = edge.proxy
    _serve = serve.serve


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
