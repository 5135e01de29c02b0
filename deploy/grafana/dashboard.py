"""Build deploy/grafana/turbogate.json from code with grafana-foundation-sdk.

    python deploy/grafana/dashboard.py > deploy/grafana/turbogate.json

tests/deploy/test_grafana.py rebuilds it and fails if the committed JSON differs, and checks
every query's metric names against a live gateway's and emulator's ``/metrics``.
"""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import dashboard, prometheus, statetimeline, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
POOL = 'pool=~"$pool"'
RATE = "$__rate_interval"


def query(expr: str, legend: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend)


def series(title: str, unit: str, *queries: prometheus.Dataquery, width: int = 8,
           description: str = "") -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).datasource(DS).span(width).height(8).description(description)
    for ref, q in zip("ABCDEF", queries, strict=False):
        panel = panel.with_target(q.ref_id(ref))
    return panel


def quantile(q: float, metric: str, by: str, where: str = POOL) -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{{{where}}}[{RATE}])))"


def build() -> dashboard.Dashboard:
    board = (
        dashboard.Dashboard("turbogate")
        .uid("turbogate-gateway")
        .tags(["turbogate", "llm"])
        .refresh("30s")
        .time("now-3h", "now")
        .description("Tiers, shedding, replica bands and scale-out of the turbogate gateway (docs/deploy.md).")
        .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(
            dashboard.QueryVariable("pool").label("Pool").datasource(DS)
            .query("label_values(turbogate_pool_slots, pool)").refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True).include_all(True))
        .with_row(dashboard.Row("Tiers"))
        .with_panel(series("TTFT p95 by tier", "s", query(quantile(0.95, "turbogate_ttft_seconds", "tier"), "{{tier}}"),
                           description="Upstream time to the first streamed chunk (streams only)."))
        .with_panel(series("TTFT p50 by tier", "s", query(quantile(0.5, "turbogate_ttft_seconds", "tier"), "{{tier}}")))
        .with_panel(series("Queue time (L1) p95 by tier", "s",
                           query(quantile(0.95, "turbogate_queue_time_seconds", "tier", ""), "{{tier}}")))
        .with_panel(series("Requests by tier served and status", "reqps",
                           query(f"sum by (tier_served, status) (rate(turbogate_requests_total[{RATE}]))",
                                 "{{tier_served}} {{status}}")))
        .with_panel(series("Shed by reason", "reqps",
                           query(f"sum by (reason, tier) (rate(turbogate_shed_total[{RATE}]))", "{{tier}}: {{reason}}"),
                           description="Requests L1 refused (503/429 with Retry-After)."))
        .with_panel(series("Queued and in flight by tier", "short",
                           query(f"sum by (tier) (turbogate_queue_depth{{{POOL}}})", "queued {{tier}}"),
                           query(f"sum by (tier) (turbogate_in_flight{{{POOL}}})", "in flight {{tier}}")))
        .with_row(dashboard.Row("Replicas"))
        .with_panel(statetimeline.Panel().title("Replica band (0 light, 1 busy, 2 saturated)").datasource(DS)
                    .span(12).height(8)
                    .with_target(query(f"max by (replica) (turbogate_replica_band{{{POOL}}})", "{{replica}}")
                                 .ref_id("A")))
        .with_panel(statetimeline.Panel().title("Replica health (1 healthy, 0 ejected)").datasource(DS)
                    .span(12).height(8)
                    .with_target(query(f"min by (replica) (turbogate_replica_healthy{{{POOL}}})", "{{replica}}")
                                 .ref_id("A")))
        .with_panel(series("KV cache use (engine)", "percentunit",
                           query("max by (instance) (vllm:kv_cache_usage_perc)", "{{instance}}"),
                           description="From the engines' own /metrics (vLLM); the gateway bands on it.", width=8))
        .with_panel(series("Learned concurrency limit and in flight", "short",
                           query(f"max by (replica) (turbogate_replica_concurrency_limit{{{POOL}}})",
                                 "limit {{replica}}"),
                           query(f"sum by (replica) (turbogate_replica_in_flight{{{POOL}}})", "in flight {{replica}}"),
                           width=8))
        .with_panel(series("Upstream retries", "reqps",
                           query(f"sum by (pool) (rate(turbogate_upstream_retries_total{{{POOL}}}[{RATE}]))",
                                 "{{pool}}"), width=8))
        .with_row(dashboard.Row("Scale-out"))
        .with_panel(series("Scale-out desired (1 = pool saturated)", "short",
                           query(f"max by (pool) (turbogate_scale_out_desired{{{POOL}}})", "{{pool}}"),
                           description="What the KEDA ScaledObject / HPA scales the engines on."))
        .with_panel(series("Dispatch slots L2 offers L1", "short",
                           query(f"sum by (pool) (turbogate_pool_slots{{{POOL}}})", "{{pool}}")))
        .with_panel(series("Tier switches (1 on)", "short",
                           query("min by (tier) (turbogate_tier_enabled)", "{{tier}}")))
    )
    return board.build()


def _drop_nulls(value: object) -> object:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def render() -> str:
    board = json.loads(JSONEncoder().encode(build()))
    for number, panel in enumerate(board["panels"], 1):  # Grafana wants unique panel ids
        panel["id"] = number
    return json.dumps(_drop_nulls(board), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
