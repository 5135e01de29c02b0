"""The report's plotly figures (latency, throughput, distributions, waterfall, queue heatmap, timelines)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from turbogate.results.fmt import fmt_ms, fmt_num
from turbogate.results.schema import ALL, RequestRecord, Sample
from turbogate.results.stats import tier_key
from turbogate.results.summary import Summary

MAX_POINTS = 20_000  # histogram inputs are subsampled beyond this to keep the file small
COLORS = {"turbo": "#d62728", "standard": "#1f77b4", "relax": "#2ca02c", ALL: "#444444", "none": "#7f7f7f"}
ENGINE_SERIES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:gpu_cache_usage_perc", "turbogate_emulator_kv_fragmentation")


def color(tier: str) -> str:
    return COLORS.get(tier, "#9467bd")


def log_ticks(values: Sequence[float]) -> dict[str, Any]:
    """Tick values and labels for a log latency axis: decades only, or 1-2-5 when the data spans less than
    two decades — so every label is a round, readable duration and minor ticks stay unlabeled."""
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return {}
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    mult = (1,) if hi - lo >= 2 else (1, 2, 5)
    ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in mult if min(vals) / 2 <= m * 10.0 ** e <= max(vals) * 2]
    return {"tickvals": ticks, "ticktext": [fmt_ms(t) for t in ticks], "minor": {"showgrid": True}}


def latency_figure(s: Summary) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT percentiles", "E2E latency percentiles"))
    seen: dict[int, list[float]] = {1: [], 2: []}
    for col, metric in ((1, "ttft"), (2, "e2e")):
        for tier in s.tiers:
            for stat, dash in (("p50", "dot"), ("p95", "solid"), ("p99", "dash")):
                pts = s.latency_curve(tier, metric, stat)  # None where requests were still running: a gap
                if not any(y is not None for _, y in pts):
                    continue
                seen[col] += [y for _, y in pts if y is not None]
                fig.add_trace(go.Scatter(
                    x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                    name=f"{tier} {stat}", legendgroup=tier, showlegend=(col == 1), connectgaps=False,
                    line={"color": color(tier), "dash": dash}), row=1, col=col)
    _mark_knees(fig, s, cols=(1, 2), spans=[(min(seen[c], default=0.01), max(seen[c], default=1.0)) for c in (1, 2)])
    fig.update_xaxes(title_text="offered load, all tiers (req/s)")
    for col in (1, 2):
        fig.update_yaxes(type="log", row=1, col=col, **log_ticks(seen[col]))
    fig.update_layout(title="Latency against offered load (knee marked)", height=480)
    return fig


def _mark_knees(fig: go.Figure, s: Summary, cols: Sequence[int], spans: Sequence[tuple[float, float]]) -> None:
    """A dashed vertical line per tier's knee, named in the legend ("knee all: 9.5 req/s") rather than written on
    the plot, so labels of knees close together can never collide."""
    for tier, knee in s.knees.items():
        if knee.value is None:
            continue
        for col, (lo, hi) in zip(cols, spans, strict=True):
            trace = go.Scatter(x=[knee.value, knee.value], y=[lo, hi], mode="lines", hoverinfo="name",
                               name=f"knee {tier}: {fmt_num(knee.value)} req/s", legendgroup=f"knee {tier}",
                               showlegend=(col == cols[0]),
                               line={"color": color(tier), "dash": "dashdot", "width": 1.5})
            if len(cols) > 1:
                fig.add_trace(trace, row=1, col=col)
            else:
                fig.add_trace(trace)


def throughput_figure(s: Summary) -> go.Figure:
    fig = go.Figure()
    xs = sorted({st.offered_rps for st in s.steps})
    if xs:
        fig.add_trace(go.Scatter(x=[0, xs[-1]], y=[0, xs[-1]], mode="lines", name="achieved = offered",
                                 line={"color": "#bbbbbb", "dash": "dot"}))
    for tier in s.tiers:
        pts = s.throughput_curve(tier)
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                 name=f"{tier} achieved", line={"color": color(tier)}))
        good = sorted((st.offered_rps, st.tiers[tier].goodput_rps) for st in s.steps if tier in st.tiers)
        if s.slo.is_set():
            fig.add_trace(go.Scatter(x=[p[0] for p in good], y=[p[1] for p in good], mode="lines",
                                     name=f"{tier} goodput", line={"color": color(tier), "dash": "dash"}))
    top = max([st.offered_rps for st in s.steps] + [g.achieved_rps for st in s.steps for g in st.tiers.values()],
              default=1.0)
    _mark_knees(fig, s, cols=(1,), spans=[(0.0, top)])
    fig.update_layout(title="Achieved against offered throughput", xaxis_title="offered load, all tiers (req/s)",
                      yaxis_title="completed req/s", height=440)
    return fig


def _sample(values: list[float], rng: random.Random) -> list[float]:
    return values if len(values) <= MAX_POINTS else rng.sample(values, MAX_POINTS)


def log_histogram_axis(values: Sequence[float], bins: int = 30) -> tuple[float, float, float]:
    """(start, end, bin size) in log10 seconds for one tier's histogram: its own span, so a Turbo TTFT of
    ~50 ms fills its panel instead of hiding in Standard's first bar of a 0–20 s axis."""
    logs = [math.log10(v) for v in values if v > 0 and math.isfinite(v)]
    if not logs:
        return (-3.0, 1.0, 4.0 / bins)
    lo, hi = min(logs), max(logs)
    if hi - lo < 0.1:  # a very tight tier still gets a readable width (±12 % around its centre)
        mid = (lo + hi) / 2
        lo, hi = mid - 0.05, mid + 0.05
    size = (hi - lo) / bins
    return (lo - size, hi + size, size)


def _log_ticks_between(start: float, end: float, n: int = 5) -> dict[str, Any]:
    vals = [start + (end - start) * i / (n - 1) for i in range(n)]
    return {"tickvals": vals, "ticktext": [fmt_ms(10.0 ** v) for v in vals]}


def distribution_figure(records: Sequence[RequestRecord]) -> go.Figure:
    """TTFT and TPOT per tier, one row of panels per tier, each on a log axis fitted to that tier's values."""
    rng = random.Random(0)
    order = [*COLORS]  # turbo, standard, relax first: Turbo's panels on top
    tiers = sorted({tier_key(r) for r in records}, key=lambda t: (order.index(t) if t in order else len(order), t))
    tiers = tiers or ["none"]
    titles = [f"{tier} {metric}" for tier in tiers for metric in ("TTFT", "TPOT")]
    fig = make_subplots(rows=len(tiers), cols=2, subplot_titles=titles, vertical_spacing=0.5 / len(tiers) / 2)
    for row, tier in enumerate(tiers, start=1):
        ok = [r for r in records if r.ok and tier_key(r) == tier]
        for col, values in ((1, [r.ttft_s for r in ok if r.ttft_s is not None]),
                            (2, [r.tpot_s for r in ok if r.tpot_s is not None])):
            shown = _sample([v for v in values if v > 0], rng)
            start, end, size = log_histogram_axis(shown)
            fig.add_trace(go.Histogram(
                x=[math.log10(v) for v in shown], xbins={"start": start, "end": end, "size": size}, name=tier,
                legendgroup=tier, showlegend=(col == 1), marker={"color": color(tier)},
                hovertemplate=f"{tier}: %{{y}} requests<extra></extra>"), row=row, col=col)
            fig.update_xaxes(range=[start, end], row=row, col=col, **_log_ticks_between(start, end))
    fig.update_yaxes(title_text="requests", col=1)
    fig.update_layout(title="TTFT and TPOT distributions per tier (log scale, each tier on its own range)",
                      height=180 + 220 * len(tiers), bargap=0.05)
    return fig


# Server-Timing's parts in the order a request meets the layers (L4 job wait, L1 queue, L3 pool, L2 pick).
LAYER_ORDER = ("l4", "l1", "l3", "l2", "upstream", "ttft")
LAYER_LABELS = {"l4": "L4 job: waiting for its steps", "l1": "L1 queue", "l3": "L3 pool round trip",
                "l2": "L2 replica pick", "upstream": "upstream", "ttft": "upstream to first token"}


def waterfall_figure(records: Sequence[RequestRecord]) -> go.Figure | None:
    """Mean time per layer and tier from Server-Timing; a layer (L3, L4) appears when requests carried it."""
    tiers = sorted({tier_key(r) for r in records})
    seen: set[str] = set()
    for r in records:
        seen.update(r.server_timing_ms)
    if not seen:
        return None
    parts = sorted(seen, key=lambda n: (LAYER_ORDER.index(n) if n in LAYER_ORDER else len(LAYER_ORDER), n))
    fig = go.Figure()
    means: dict[str, dict[str, float]] = {}
    for tier in tiers:
        ok = [r for r in records if r.ok and tier_key(r) == tier and r.server_timing_ms and r.e2e_s is not None]
        if not ok:
            continue
        m = {p: sum(r.server_timing_ms.get(p, 0.0) for r in ok) / len(ok) for p in parts}
        e2e_ms = sum((r.e2e_s or 0.0) * 1000 for r in ok) / len(ok)
        # Server-Timing is sent with the headers, so "upstream" may cover only time to first byte.
        m["client + rest"] = max(0.0, e2e_ms - sum(m.values()))
        means[tier] = m
    for part in [*parts, "client + rest"]:
        fig.add_trace(go.Bar(y=list(means), x=[means[t][part] for t in means], name=LAYER_LABELS.get(part, part),
                             orientation="h"))
    fig.update_layout(title="Latency waterfall from Server-Timing (mean ms per tier)", barmode="stack",
                      xaxis_title="ms", height=320)
    return fig


def queue_heatmap(samples: Sequence[Sample]) -> go.Figure | None:
    rows: dict[str, dict[int, float]] = {}
    for smp in samples:
        if "queue" in smp.name and ("depth" in smp.name or "length" in smp.name) and "tier" in smp.labels:
            rows.setdefault(smp.labels["tier"], {})
            sec = int(smp.t)
            rows[smp.labels["tier"]][sec] = rows[smp.labels["tier"]].get(sec, 0.0) + smp.value
    if not rows:
        return None
    secs = sorted({s for r in rows.values() for s in r})
    tiers = sorted(rows)
    z = [[rows[t].get(s, 0.0) for s in secs] for t in tiers]
    fig = go.Figure(go.Heatmap(x=secs, y=tiers, z=z, colorscale="Viridis", colorbar={"title": "queued"}))
    fig.update_layout(title="Gateway queue depth per tier over time", xaxis_title="s since start", height=300)
    return fig


def layer_heatmap(records: Sequence[RequestRecord]) -> go.Figure | None:
    """Mean time per layer (Server-Timing, ms) by second of the run: one row per layer, L4 and L3 included, so
    all four layers read in one picture; None when no request carried L3 or L4 (the waterfall then says it all)."""
    sums: dict[str, dict[int, list[float]]] = {}
    for r in records:
        if r.sent_s is None:
            continue
        sec = int(r.sent_s)
        for name, ms in r.server_timing_ms.items():
            if name in ("l4", "l1", "l3", "l2"):
                cell = sums.setdefault(name, {}).setdefault(sec, [0.0, 0.0])
                cell[0] += ms
                cell[1] += 1
    if not ({"l3", "l4"} & set(sums)):
        return None
    layers = [n for n in LAYER_ORDER if n in sums]
    secs = sorted({sec for row in sums.values() for sec in row})
    z = [[(sums[n][sec][0] / sums[n][sec][1]) if sec in sums[n] else None for sec in secs] for n in layers]
    fig = go.Figure(go.Heatmap(x=secs, y=[LAYER_LABELS[n] for n in layers], z=z, colorscale="Viridis",
                               colorbar={"title": "mean ms"}, hoverongaps=False))
    fig.update_layout(title="Time per layer over the run (Server-Timing, mean ms of the requests sent each second)",
                      xaxis_title="s since start", height=160 + 60 * len(layers))
    return fig


def _unit(name: str) -> str:
    """Which axis a series belongs on: rates, fractions (0–1), percentages or counts never share one."""
    if name.endswith("_rps"):
        return "rate"
    if name.endswith(("_perc", "_fragmentation")) or "usage" in name:
        return "fraction"
    if name.endswith("_pct"):
        return "percent"
    if name.endswith("_s"):
        return "seconds"
    return "count"


UNIT_TITLES = {"rate": "req/s", "count": "count", "fraction": "fraction (0–1)", "percent": "%", "seconds": "s"}


SOURCE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf")
METRIC_DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def _source_name(source: str) -> str:
    """``http://127.0.0.1:8001/metrics`` → ``127.0.0.1:8001``: a replica reads as its address."""
    return source.removeprefix("http://").removeprefix("https://").removesuffix("/metrics")


def timelines(samples: Sequence[Sample]) -> go.Figure | None:
    """One panel per unit; within one, a replica (or the bench, or a GPU) keeps one colour and a metric one dash,
    so a dozen series stay told apart and one replica's lines read together."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    units: dict[tuple[str, str], str] = {}
    for smp in samples:
        engine = smp.name in ENGINE_SERIES
        if not (engine or smp.source.startswith("nvml") or smp.source == "bench"):
            continue
        key = (_source_name(smp.source), smp.name)
        series.setdefault(key, []).append((smp.t, smp.value))
        units[key] = _unit(smp.name)
    if not series:
        return None
    order = [u for u in UNIT_TITLES if u in units.values()]
    sources = sorted({src for src, _ in series})
    names = sorted({name for _, name in series})
    fig = make_subplots(rows=len(order), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[UNIT_TITLES[u] for u in order])
    for (src, name), pts in sorted(series.items()):
        pts.sort()
        fig.add_trace(go.Scatter(
            x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines", name=f"{name} · {src}", legendgroup=src,
            legendgrouptitle={"text": src},
            line={"color": SOURCE_COLORS[sources.index(src) % len(SOURCE_COLORS)],
                  "dash": METRIC_DASHES[names.index(name) % len(METRIC_DASHES)]}),
            row=order.index(units[(src, name)]) + 1, col=1)
    if "fraction" in order:
        fig.update_yaxes(range=[0, 1.05], row=order.index("fraction") + 1, col=1)
    fig.update_xaxes(title_text="s since start", row=len(order), col=1)
    fig.update_layout(title="Engine, GPU and bench timelines (colour: replica or source; dash: metric)",
                      height=240 + 200 * len(order), legend={"groupclick": "toggleitem"})
    return fig
