"""The gateway's Prometheus collectors: the state read at scrape time (queues, replica bands,
switches, the idle poll) and the request path's own series (gateway/metrics.py) as families.
Python classes on prometheus_client's ``Collector``; nothing here runs per request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from turbogate.sched import TIERS

if TYPE_CHECKING:
    from turbogate.gateway.busypoll import IdlePoll
    from turbogate.gateway.metrics import FastCounter, FastHistogram
    from turbogate.gateway.runtime import Runtime


class StateCollector(Collector):
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


class FastCollector(Collector):
    def __init__(self, metrics: list[FastCounter | FastHistogram]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        for metric in self.metrics:
            yield metric.family()


class PollCollector(Collector):
    def __init__(self, poll: IdlePoll) -> None:
        self.poll = poll

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield GaugeMetricFamily("turbogate_idle_poll_window_seconds", "How long the event loop polls, once idle, "
                                "before it sleeps (adaptive: learnt from its idle periods)",
                                value=self.poll.window.window_s)
        yield CounterMetricFamily("turbogate_idle_poll_seconds", "Time the event loop polled where it could have "
                                  "slept (its rate is the share of a core the poll costs)", value=self.poll.polled_s)


