"""Prometheus metrics of the gateway (own registry, so several apps can live in one process).

Counters and histograms are updated on the request path as dict entries (this module compiles in a
compiled build: setup.py); gauges that describe state (queues, replica bands, switches) are read
at scrape time by the collectors of gateway/collectors.py, so they cost nothing per request.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from turbogate.gateway.collectors import FastCollector, PollCollector, StateCollector

if TYPE_CHECKING:
    from turbogate.gateway.busypoll import IdlePoll
    from turbogate.gateway.runtime import Runtime

_LAT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class FastCounter:
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


class FastHistogram:
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


class GatewayMetrics:
    def __init__(self, rt: Runtime) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        reg = self.registry
        self.requests = FastCounter(
            "turbogate_requests", "Requests by tenant, tier asked, tier served and HTTP status",
            ["tenant", "tier_asked", "tier_served", "status"],
        )
        self.queue_time = FastHistogram("turbogate_queue_time_seconds", "Time spent in L1 queues", ["tier"],
                                         _LAT_BUCKETS)
        self.upstream = FastHistogram("turbogate_upstream_latency_seconds", "Upstream time, dispatch to full answer",
                                       ["pool", "tier"], _LAT_BUCKETS)
        self.ttft = FastHistogram("turbogate_ttft_seconds", "Upstream time to first streamed chunk",
                                   ["pool", "tier"], _LAT_BUCKETS)
        self.shed = Counter("turbogate_shed", "Requests refused with Retry-After: the error code (reason) and the "
                            "rule that refused (by: l1, tenant_limits, health, http, store, jobs)",
                            ["reason", "tier", "by"], registry=reg)
        self.retries = Counter("turbogate_upstream_retries", "Requests retried on another replica", ["pool"],
                               registry=reg)
        # Goodput within each tier's objective (tiers.<tier>.ttft_slo_s): streams whose first token
        # reached the client within it, from arrival; beside turbogate_requests_total, the share.
        self.within_objective = FastCounter(
            "turbogate_ttft_within_objective", "Streams whose first token came within their served tier's "
            "ttft_slo_s, counted from arrival (goodput within the objective)", ["tier"])
        self._objective: dict[str, float | None] = {name: t.ttft_slo_s for name, t in rt.config.tiers.items()}
        reg.register(FastCollector([self.requests, self.queue_time, self.upstream, self.ttft, self.within_objective]))
        reg.register(StateCollector(rt))

    def count(self, tenant: str, asked: str, served: str, status: int) -> None:
        self.requests.inc((tenant, asked, served, str(status)))

    def observe_queue(self, tier: str, seconds: float) -> None:
        self.queue_time.observe((tier,), seconds)

    def observe_upstream(self, pool: str, tier: str, seconds: float) -> None:
        self.upstream.observe((pool, tier), seconds)

    def observe_ttft(self, pool: str, tier: str, seconds: float) -> None:
        self.ttft.observe((pool, tier), seconds)

    def observe_first_token(self, tier: str, since_arrival_s: float) -> None:
        objective = self._objective.get(tier)
        if objective is not None and since_arrival_s <= objective:
            self.within_objective.inc((tier,))

    def watch_idle_poll(self, poll: IdlePoll) -> None:
        """Export the event loop's poller (gateway/busypoll.py): its window now and the time it
        has polled where the loop could have slept (a share of a core, what the poll costs)."""
        self.registry.register(PollCollector(poll))

    def render(self) -> bytes:
        return generate_latest(self.registry)
