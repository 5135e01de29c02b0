"""Prometheus metrics of the gateway (own registry, so several apps can live in one process).

Counters and histograms are updated on the request path through cached label children; gauges
that describe state (queues, replica bands, switches) are read at scrape time by a collector,
so they cost nothing per request.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from turbogate.sched import TIERS

if TYPE_CHECKING:
    from turbogate.gateway.runtime import Runtime

_LAT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class _StateCollector(Collector):
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rt = self.rt
        now = time.perf_counter()
        depth = GaugeMetricFamily("turbogate_queue_depth", "Requests waiting in L1", labels=["pool", "tier"])
        in_flight = GaugeMetricFamily("turbogate_in_flight", "Requests dispatched upstream", labels=["pool", "tier"])
        slots = GaugeMetricFamily("turbogate_pool_slots", "Dispatch slots L2 offers L1", labels=["pool"])
        scale = GaugeMetricFamily("turbogate_scale_out_desired", "1 while the pool stays saturated", labels=["pool"])
        for pool in rt.pools.values():
            for tier in TIERS:
                depth.add_metric([pool.name, tier.value], pool.admission.queue_length(tier))
                in_flight.add_metric([pool.name, tier.value], pool.admission.tier_in_flight(tier))
            slots.add_metric([pool.name], rt.picker.slots(pool.name, now))
            scale.add_metric([pool.name], 1.0 if rt.picker.scale_out_desired(pool.name, now) else 0.0)
        band = GaugeMetricFamily("turbogate_replica_band", "0 light, 1 busy, 2 saturated", labels=["pool", "replica"])
        score = GaugeMetricFamily("turbogate_replica_score", "L2 score (lower is chosen)", labels=["pool", "replica"])
        healthy = GaugeMetricFamily("turbogate_replica_healthy", "1 healthy, 0 ejected", labels=["pool", "replica"])
        r_flight = GaugeMetricFamily("turbogate_replica_in_flight", "Own in-flight", labels=["pool", "replica"])
        for r in rt.picker.replicas():
            labels = [r.pool, r.id]
            band.add_metric(labels, int(rt.picker.band(r, now)))
            score.add_metric(labels, rt.picker.score(r, now))
            healthy.add_metric(labels, 1.0 if r.health.value == "healthy" else 0.0)
            r_flight.add_metric(labels, r.in_flight)
        enabled = GaugeMetricFamily("turbogate_tier_enabled", "Hot switch state", labels=["tier"])
        for tier in TIERS:
            enabled.add_metric([tier.value], 1.0 if tier in rt.enabled else 0.0)
        yield from (depth, in_flight, slots, scale, band, score, healthy, r_flight, enabled)


class GatewayMetrics:
    def __init__(self, rt: Runtime) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        reg = self.registry
        self.requests = Counter(
            "turbogate_requests", "Requests by tenant, tier asked, tier served and HTTP status",
            ["tenant", "tier_asked", "tier_served", "status"], registry=reg,
        )
        self.shed = Counter("turbogate_shed", "Requests refused by L1", ["reason", "tier"], registry=reg)
        self.queue_time = Histogram(
            "turbogate_queue_time_seconds", "Time spent in L1 queues", ["tier"], buckets=_LAT_BUCKETS, registry=reg
        )
        self.upstream = Histogram(
            "turbogate_upstream_latency_seconds", "Upstream time, dispatch to full answer",
            ["pool", "tier"], buckets=_LAT_BUCKETS, registry=reg,
        )
        self.ttft = Histogram(
            "turbogate_ttft_seconds", "Upstream time to first streamed chunk", ["pool", "tier"],
            buckets=_LAT_BUCKETS, registry=reg,
        )
        self.retries = Counter("turbogate_upstream_retries", "Requests retried on another replica", ["pool"],
                               registry=reg)
        reg.register(_StateCollector(rt))
        self._req: dict[tuple[str, str, str, int], object] = {}
        self._qt: dict[str, object] = {}
        self._up: dict[tuple[str, str], object] = {}
        self._tt: dict[tuple[str, str], object] = {}

    def count(self, tenant: str, asked: str, served: str, status: int) -> None:
        key = (tenant, asked, served, status)
        child = self._req.get(key)
        if child is None:
            child = self._req[key] = self.requests.labels(tenant, asked, served, str(status))
        child.inc()  # type: ignore[attr-defined]

    def observe_queue(self, tier: str, seconds: float) -> None:
        child = self._qt.get(tier)
        if child is None:
            child = self._qt[tier] = self.queue_time.labels(tier)
        child.observe(seconds)  # type: ignore[attr-defined]

    def observe_upstream(self, pool: str, tier: str, seconds: float) -> None:
        child = self._up.get((pool, tier))
        if child is None:
            child = self._up[(pool, tier)] = self.upstream.labels(pool, tier)
        child.observe(seconds)  # type: ignore[attr-defined]

    def observe_ttft(self, pool: str, tier: str, seconds: float) -> None:
        child = self._tt.get((pool, tier))
        if child is None:
            child = self._tt[(pool, tier)] = self.ttft.labels(pool, tier)
        child.observe(seconds)  # type: ignore[attr-defined]

    def render(self) -> bytes:
        return generate_latest(self.registry)
