"""Prometheus metrics of the gateway (own registry, so several apps can live in one process).

Counters and histograms are updated on the request path through cached label children; gauges
that describe state (queues, replica bands, switches) are read at scrape time by a collector,
so they cost nothing per request.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from turbogate.sched import TIERS

if TYPE_CHECKING:
    from turbogate.gateway.busypoll import IdlePoll
    from turbogate.gateway.runtime import Runtime

_LAT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class _StateCollector(Collector):
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def collect(self) -> Iterator[GaugeMetricFamily]:
        flow = self.rt.flow
        picker = flow.picker
        now = time.perf_counter()
        depth = GaugeMetricFamily("turbogate_queue_depth", "Requests waiting in L1", labels=["pool", "tier"])
        in_flight = GaugeMetricFamily("turbogate_in_flight", "Requests dispatched upstream", labels=["pool", "tier"])
        slots = GaugeMetricFamily("turbogate_pool_slots", "Dispatch slots L2 offers L1", labels=["pool"])
        scale = GaugeMetricFamily("turbogate_scale_out_desired", "1 while the pool stays saturated", labels=["pool"])
        for name, admission in flow.admissions():
            for tier in TIERS:
                depth.add_metric([name, tier.value], admission.queue_length(tier))
                in_flight.add_metric([name, tier.value], admission.tier_in_flight(tier))
            slots.add_metric([name], picker.slots(name, now))
            scale.add_metric([name], 1.0 if picker.scale_out_desired(name, now) else 0.0)
        band = GaugeMetricFamily("turbogate_replica_band", "0 light, 1 busy, 2 saturated", labels=["pool", "replica"])
        score = GaugeMetricFamily("turbogate_replica_score", "L2 score (lower is chosen)", labels=["pool", "replica"])
        healthy = GaugeMetricFamily("turbogate_replica_healthy", "1 healthy, 0 ejected", labels=["pool", "replica"])
        r_flight = GaugeMetricFamily("turbogate_replica_in_flight", "Own in-flight", labels=["pool", "replica"])
        limit = GaugeMetricFamily("turbogate_replica_concurrency_limit", "Learned concurrency limit",
                                  labels=["pool", "replica"])
        for r in picker.replicas():
            labels = [r.pool, r.id]
            band.add_metric(labels, int(picker.band(r, now)))
            score.add_metric(labels, picker.score(r, now))
            healthy.add_metric(labels, 1.0 if r.health.value == "healthy" else 0.0)
            r_flight.add_metric(labels, r.in_flight)
            limit.add_metric(labels, r.limit)
        guard = GaugeMetricFamily("turbogate_knee_guard_state", "Knee guard: 0 open, 1 capped, 2 closed",
                                  labels=["pool"])
        knee = GaugeMetricFamily("turbogate_knee_guard_knee_rps", "Knee in force (req/s); absent while an "
                                 "online estimate is still learning", labels=["pool", "source"])
        for name, g in flow.guards.items():
            guard.add_metric([name], {"open": 0.0, "capped": 1.0, "closed": 2.0}[g.current(now).value])
            if (k := g.knee(now)) is not None:
                knee.add_metric([name, g.source.kind], k)
        enabled = GaugeMetricFamily("turbogate_tier_enabled", "Hot switch state", labels=["tier"])
        for tier in TIERS:
            enabled.add_metric([tier.value], 1.0 if tier in flow.enabled else 0.0)
        yield from (depth, in_flight, slots, scale, band, score, healthy, r_flight, limit, guard, knee, enabled)


class _FastCounter:
    """A labelled counter for the request path: a dict increment, no lock (the gateway is one
    asyncio thread).  prometheus_client's own children cost several times more per update."""

    def __init__(self, name: str, doc: str, labels: list[str]) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, key: tuple[str, ...]) -> None:
        values = self.values
        values[key] = values.get(key, 0.0) + 1.0

    def family(self) -> CounterMetricFamily:
        fam = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        for key, value in self.values.items():
            fam.add_metric(list(key), value)
        return fam


class _FastHistogram:
    """A labelled histogram for the request path: one bisect and two additions per observation."""

    def __init__(self, name: str, doc: str, labels: list[str], buckets: tuple[float, ...]) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.bounds = list(buckets)
        self.series: dict[tuple[str, ...], list[float]] = {}  # per-bucket counts + [+Inf] + [sum]

    def observe(self, key: tuple[str, ...], value: float) -> None:
        row = self.series.get(key)
        if row is None:
            row = self.series[key] = [0.0] * (len(self.bounds) + 2)
        row[bisect_left(self.bounds, value)] += 1.0
        row[-1] += value

    def family(self) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        for key, row in self.series.items():
            total = 0.0
            buckets = []
            for bound, n in zip([*map(floatToGoString, self.bounds), "+Inf"], row[:-1], strict=True):
                total += n
                buckets.append((bound, total))
            fam.add_metric(list(key), buckets, row[-1])
        return fam


class _FastCollector(Collector):
    def __init__(self, metrics: list[_FastCounter | _FastHistogram]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        for metric in self.metrics:
            yield metric.family()


class _PollCollector(Collector):
    def __init__(self, poll: IdlePoll) -> None:
        self.poll = poll

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield GaugeMetricFamily("turbogate_idle_poll_window_seconds", "How long the event loop polls, once idle, "
                                "before it sleeps (adaptive: learnt from its idle periods)",
                                value=self.poll.window.window_s)
        yield CounterMetricFamily("turbogate_idle_poll_seconds", "Time the event loop polled where it could have "
                                  "slept (its rate is the share of a core the poll costs)", value=self.poll.polled_s)


class GatewayMetrics:
    def __init__(self, rt: Runtime) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        reg = self.registry
        self.requests = _FastCounter(
            "turbogate_requests", "Requests by tenant, tier asked, tier served and HTTP status",
            ["tenant", "tier_asked", "tier_served", "status"],
        )
        self.queue_time = _FastHistogram("turbogate_queue_time_seconds", "Time spent in L1 queues", ["tier"],
                                         _LAT_BUCKETS)
        self.upstream = _FastHistogram("turbogate_upstream_latency_seconds", "Upstream time, dispatch to full answer",
                                       ["pool", "tier"], _LAT_BUCKETS)
        self.ttft = _FastHistogram("turbogate_ttft_seconds", "Upstream time to first streamed chunk",
                                   ["pool", "tier"], _LAT_BUCKETS)
        self.shed = Counter("turbogate_shed", "Requests refused by L1", ["reason", "tier"], registry=reg)
        self.retries = Counter("turbogate_upstream_retries", "Requests retried on another replica", ["pool"],
                               registry=reg)
        reg.register(_FastCollector([self.requests, self.queue_time, self.upstream, self.ttft]))
        reg.register(_StateCollector(rt))

    def count(self, tenant: str, asked: str, served: str, status: int) -> None:
        self.requests.inc((tenant, asked, served, str(status)))

    def observe_queue(self, tier: str, seconds: float) -> None:
        self.queue_time.observe((tier,), seconds)

    def observe_upstream(self, pool: str, tier: str, seconds: float) -> None:
        self.upstream.observe((pool, tier), seconds)

    def observe_ttft(self, pool: str, tier: str, seconds: float) -> None:
        self.ttft.observe((pool, tier), seconds)

    def watch_idle_poll(self, poll: IdlePoll) -> None:
        """Export the event loop's poller (gateway/busypoll.py): its window now and the time it
        has polled where the loop could have slept (a share of a core, what the poll costs)."""
        self.registry.register(_PollCollector(poll))

    def render(self) -> bytes:
        return generate_latest(self.registry)
