"""The gateway as a raw ASGI app (no framework on the hot path; chosen by measured overhead),
and its composition root: the one module that knows every part.  It builds each part from the
config and hands it the narrow parts it uses (gateway/parts.py), chooses tracing's wrappers at
build time, and starts and stops the whole.

Every decision about a request — its tier, admission, replica, retry, deadline, shedding — is
the pure flow's (sched/flow.py); the parts only move bytes: routes.py picks the part for a
path, edge.py checks a proxied request, serve.py carries it through the flow's steps
(driver.py carries out the flow's actions), proxy.py makes the upstream calls, scrape.py feeds
the flow engine metrics.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import orjson

from turbogate import __version__, build
from turbogate.asgi import JSON_CT, AsgiApp, Receive, Scope, Send, send_json
from turbogate.config import GatewayConfig, load_config
from turbogate.configpolicy import limit_hold_s, tenant_limits
from turbogate.errors import ConfigError
from turbogate.gateway import tracing
from turbogate.gateway.admin import AdminApi
from turbogate.gateway.busypoll import IdlePoll, describe, idle_poll
from turbogate.gateway.coalesce import Coalescing
from turbogate.gateway.driver import FlowDriver
from turbogate.gateway.edge import Edge
from turbogate.gateway.jobs import JobsApi
from turbogate.gateway.learned_share import share_loop, start_learned
from turbogate.gateway.lease_share import SharedLeases
from turbogate.gateway.leases import LeasesApi, WsConnections
from turbogate.gateway.marking import marked_pools, tier_tos
from turbogate.gateway.metering import Metering
from turbogate.gateway.metrics import GatewayMetrics
from turbogate.gateway.metrics_port import MetricsEndpoint, MetricsServer
from turbogate.gateway.openapi import openapi_document
from turbogate.gateway.parts import Auth, ProxyFn, ServeFn, Shed
from turbogate.gateway.proxy import Upstream
from turbogate.gateway.regions import ClientRegions, pool_headers
from turbogate.gateway.routes import Routes
from turbogate.gateway.runtime import build_runtime
from turbogate.gateway.scrape import ReplicaChecks, scrape_all, scrape_loop
from turbogate.gateway.serve import Serve
from turbogate.gateway.usage_api import UsageApi
from turbogate.gateway.watch import sweep
from turbogate.httpclient import UpstreamPool
from turbogate.sched import Tier
from turbogate.store.base import StoreUnavailable
from turbogate.store.redis_store import RedisStore

log = logging.getLogger("turbogate.gateway")

#: ``service_tier`` words in answers: turbogate's own, or OpenAI's (config: service_tier_names).
TIER_WORDS = {
    "turbogate": {t: t.value for t in Tier},
    "openai": {Tier.TURBO: "priority", Tier.STANDARD: "default", Tier.RELAX: "flex"},
}


class GatewayApp(AsgiApp):
    """The gateway: its parts built from ``config`` and wired together, then started and stopped."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        rt = self.rt = build_runtime(config)
        flow = rt.flow
        checks = ReplicaChecks(rt)
        self.driver = checks.driver = FlowDriver(flow, checks.probe, measure_rtt=checks.measure_rtt,
                                                 warm_up=checks.warm_up)
        self.metrics = metrics = GatewayMetrics(rt)
        self.max_body = max_body = config.limits.max_body_bytes
        self.idle_poll: IdlePoll | None = None  # its poller, made at start-up on that loop (gateway/guard.py reads it)
        self._started = False
        self._tracing = tracing.from_env()  # OpenTelemetry, off unless TURBOGATE_OTEL is on
        auth = Auth(rt.tenant_for_auth, rt.is_admin)
        shed = Shed(metrics.shed)
        # Usage records, budgets, shared switches and limits (docs/metering.md); leases via the store.
        self.meter = meter = Metering(config, flow, tenant_limits(config), limit_hold_s(config))
        self.lease_share = lease_share = SharedLeases(flow.leases, meter.store)
        self.upstream = Upstream(flow, self.driver, rt.replicas, metrics, meter.strip)
        self.serving = Serve(flow, self.driver, meter, metrics, shed, pool_headers(config),
                             TIER_WORDS[config.service_tier_names], self.upstream.attempt)
        serve: ServeFn = self.serving.serve
        if self._tracing is not None:
            serve = self._tracing.wrap_serve(serve)
        # Identical deterministic requests share one upstream call on the routes config names (gateway/coalesce.py).
        self.coalescing = (Coalescing(config.coalesce, metrics.registry, flow, meter, metrics, serve)
                           if config.coalesce.routes else None)
        self.edge = Edge(flow, auth, metrics, meter, ClientRegions(config.regions), lease_share, self.coalescing,
                         serve, max_body)
        entry: ProxyFn = self.edge.proxy
        if self._tracing is not None:
            entry = self._tracing.wrap_proxy(entry)
        self.jobs = JobsApi(config.jobs, auth, flow, meter, shed, max_body)  # L4 job graphs (gateway/jobs.py)
        self.leases = LeasesApi(auth, flow, lease_share, WsConnections(config.limits), shed, max_body)
        self.metrics_endpoint = MetricsEndpoint(metrics.render, config.metrics.token_sha256)
        self._metrics_server: MetricsServer | None = None
        self.routes = Routes(entry, auth, flow, meter.store, self.jobs, self.leases,
                             UsageApi(auth, flow, meter, shed, max_body), AdminApi(auth, flow, meter, max_body),
                             None if config.metrics.port is not None else self.metrics_endpoint,
                             _models_body(config), openapi_document(config), max_body)
        self.jobs.run_steps_through(self.routes.handle_http)  # a job's steps are requests like any other
        # The routes answer HTTP directly: the servers await this bound method, with no call between.
        self.handle_http = self.routes.handle_http  # type: ignore[method-assign]

    async def handle_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.routes.handle_http(scope, receive, send)  # shadowed per instance in __init__

    async def handle_websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.leases.handle_ws(scope, receive, send)  # the only WebSocket route: lease heartbeats

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
        if self._tracing is not None:  # the clients exist now: their attempts get upstream spans
            self._tracing.trace_replicas(self.rt.replicas.values())
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
        if cfg.metrics.port is not None:
            self._metrics_server = MetricsServer(self.metrics_endpoint, cfg, cfg.metrics.host or cfg.listen.host,
                                                 cfg.metrics.port)
            await self._metrics_server.start()
        await self.meter.start()
        await start_learned(self.rt.flow, self.meter.store)  # a restart is not a cold start
        primary = self.meter.store.primary
        if isinstance(primary, RedisStore):  # usage records must outlive a Redis restart (docs/metering.md)
            with contextlib.suppress(StoreUnavailable):  # unreachable: the store's own warnings say so
                why = await primary.durability()
                if why is not None:
                    log.warning("Redis store %s %s", primary.url, why)
        loop = self.serving.loop = asyncio.get_running_loop()
        self.rt.tasks = [loop.create_task(scrape_loop(self.rt, self.driver)),
                         loop.create_task(sweep(self.serving.watches, self.driver)),
                         loop.create_task(share_loop(self.rt.flow, self.meter.store))]
        self.driver.run(())  # arm the flow's timer now: warm-ups and round-trip probes are due at start

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



def _models_body(config: GatewayConfig) -> bytes:
    """``GET /v1/models``: each model once (a model may be served by several pools: L3)."""
    first_pool: dict[str, str] = {}
    for p in config.pools:
        for m in p.models:
            first_pool.setdefault(m, p.name)
    models = [{"id": m, "object": "model", "created": 0, "owned_by": p} for m, p in first_pool.items()]
    return orjson.dumps({"object": "list", "data": models})


def create_app(config: GatewayConfig) -> GatewayApp:
    return GatewayApp(config)


def built_app(cfg: GatewayConfig) -> GatewayApp:
    """The gateway for ``cfg``, its start-up state out of the GC's sight: what one process serves."""
    from turbogate.gateway.gcpolicy import settle_after_startup

    app = GatewayApp(cfg)
    settle_after_startup()  # gateway/gcpolicy.py
    return app


def app_from_env() -> GatewayApp:
    """Factory for ``uvicorn --factory`` workers: the config path comes from TURBOGATE_CONFIG."""
    from turbogate.gateway.cli import configure_logging

    configure_logging(os.environ.get("TURBOGATE_LOG_LEVEL", "warning"))
    from turbogate.gateway.cli import with_knee_from

    knee_from = [x for x in os.environ.get("TURBOGATE_KNEE_FROM", "").split("\n") if x]
    return built_app(with_knee_from(load_config(os.environ["TURBOGATE_CONFIG"]), knee_from))


__all__ = ["JSON_CT", "GatewayApp", "app_from_env", "create_app", "send_json"]
