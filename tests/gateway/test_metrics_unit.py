"""The gateway's request-path counters and histograms render as valid Prometheus text (no sockets)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import gateway_config, pool
from turbogate.config import parse_config
from turbogate.gateway.app import GatewayApp


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    app = GatewayApp(parse_config(gateway_config([pool("p", ["m"], ["http://127.0.0.1:9"])])))
    m = app.metrics
    for value in (0.0005, 0.0004, 0.002, 500.0):  # 0.0005 sits exactly on a bound: counted in it
        m.observe_queue("turbo", value)
    m.count("acme", "turbo", "standard", 200)
    m.count("acme", "turbo", "standard", 200)
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    hist = families["turbogate_queue_time_seconds"]
    assert hist.type == "histogram"
    buckets = {s.labels["le"]: s.value for s in hist.samples if s.name.endswith("_bucket")}
    assert buckets["0.0005"] == 2 and buckets["0.001"] == 2 and buckets["0.0025"] == 3
    assert buckets["120.0"] == 3 and buckets["+Inf"] == 4
    total = next(s.value for s in hist.samples if s.name.endswith("_sum"))
    assert abs(total - 500.0029) < 1e-9
    requests = families["turbogate_requests"]
    assert [(s.labels, s.value) for s in requests.samples if s.name == "turbogate_requests_total"] == [
        ({"tenant": "acme", "tier_asked": "turbo", "tier_served": "standard", "status": "200"}, 2.0)]


def test_goodput_within_each_tiers_objective_is_counted_by_tier() -> None:
    app = GatewayApp(parse_config(gateway_config([pool("p", ["m"], ["http://127.0.0.1:9"])])))
    m = app.metrics
    slo = {name: t.ttft_slo_s for name, t in app.config.tiers.items()}
    assert slo["standard"] is not None
    m.observe_first_token("standard", slo["standard"] - 0.1)  # within: counted
    m.observe_first_token("standard", slo["standard"] + 0.1)  # past it: not goodput
    m.observe_first_token("turbo", 0.01)
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    good = {s.labels["tier"]: s.value for s in families["turbogate_ttft_within_objective"].samples
            if s.name == "turbogate_ttft_within_objective_total"}
    assert good == {"standard": 1.0, "turbo": 1.0}
