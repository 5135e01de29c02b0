"""The self-contained offline ``report.html`` (plotly, JS inlined once; no CDN, no network)."""

from __future__ import annotations

import html
import random
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from turbogate.results.schema import ALL, RequestRecord, Sample
from turbogate.results.stats import tier_key
from turbogate.results.summary import Summary

MAX_POINTS = 20_000  # histogram inputs are subsampled beyond this to keep the file small
COLORS = {"turbo": "#d62728", "standard": "#1f77b4", "relax": "#2ca02c", ALL: "#444444", "none": "#7f7f7f"}
ENGINE_SERIES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:gpu_cache_usage_perc", "turbogate_emulator_kv_fragmentation")


def _color(tier: str) -> str:
    return COLORS.get(tier, "#9467bd")


def _fmt(v: float | None, scale: float = 1.0, digits: int = 3) -> str:
    return "–" if v is None else f"{v * scale:.{digits}g}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _latency_figure(s: Summary) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT percentiles (s)", "E2E latency percentiles (s)"))
    for col, metric in ((1, "ttft"), (2, "e2e")):
        for tier in s.tiers:
            for stat, dash in (("p50", "dot"), ("p95", "solid"), ("p99", "dash")):
                pts = [(x, y) for x, y in s.latency_curve(tier, metric, stat) if y is not None]
                if not pts:
                    continue
                fig.add_trace(go.Scatter(
                    x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                    name=f"{tier} {stat}", legendgroup=tier, showlegend=(col == 1),
                    line={"color": _color(tier), "dash": dash}), row=1, col=col)
    for tier, knee in s.knees.items():
        if knee.value is not None:
            for col in (1, 2):
                fig.add_vline(x=knee.value, line={"color": _color(tier), "dash": "dashdot", "width": 1},
                              row=1, col=col)
            fig.add_annotation(x=knee.value, y=1.0, yref="paper", xref="x", showarrow=False,
                               text=f"knee {tier}: {knee.value:.3g}", font={"color": _color(tier)})
    fig.update_xaxes(title_text="offered load, all tiers (req/s)")
    fig.update_yaxes(type="log")
    fig.update_layout(title="Latency against offered load (knee marked)", height=480)
    return fig


def _throughput_figure(s: Summary) -> go.Figure:
    fig = go.Figure()
    xs = sorted({st.step.offered_rps for st in s.steps})
    if xs:
        fig.add_trace(go.Scatter(x=[0, xs[-1]], y=[0, xs[-1]], mode="lines", name="achieved = offered",
                                 line={"color": "#bbbbbb", "dash": "dot"}))
    for tier in s.tiers:
        pts = s.throughput_curve(tier)
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                 name=f"{tier} achieved", line={"color": _color(tier)}))
        good = sorted((st.step.offered_rps, st.tiers[tier].goodput_rps) for st in s.steps if tier in st.tiers)
        if s.slo.is_set():
            fig.add_trace(go.Scatter(x=[p[0] for p in good], y=[p[1] for p in good], mode="lines",
                                     name=f"{tier} goodput", line={"color": _color(tier), "dash": "dash"}))
    fig.update_layout(title="Achieved against offered throughput", xaxis_title="offered load, all tiers (req/s)",
                      yaxis_title="completed req/s", height=420)
    return fig


def _sample(values: list[float], rng: random.Random) -> list[float]:
    return values if len(values) <= MAX_POINTS else rng.sample(values, MAX_POINTS)


def _distribution_figure(records: Sequence[RequestRecord]) -> go.Figure:
    rng = random.Random(0)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (s)", "TPOT (s)"))
    tiers = sorted({tier_key(r) for r in records})
    for tier in tiers:
        ok = [r for r in records if r.ok and tier_key(r) == tier]
        ttft = _sample([r.ttft_s for r in ok if r.ttft_s is not None], rng)
        tpot = _sample([r.tpot_s for r in ok if r.tpot_s is not None], rng)
        fig.add_trace(go.Histogram(x=ttft, name=tier, legendgroup=tier, opacity=0.6,
                                   marker={"color": _color(tier)}), row=1, col=1)
        fig.add_trace(go.Histogram(x=tpot, name=tier, legendgroup=tier, showlegend=False, opacity=0.6,
                                   marker={"color": _color(tier)}), row=1, col=2)
    fig.update_layout(title="TTFT and TPOT distributions", barmode="overlay", height=400)
    return fig


def _waterfall_figure(records: Sequence[RequestRecord]) -> go.Figure | None:
    tiers = sorted({tier_key(r) for r in records})
    parts: list[str] = []
    for r in records:
        for name in r.server_timing_ms:
            if name not in parts:
                parts.append(name)
    if not parts:
        return None
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
        fig.add_trace(go.Bar(y=list(means), x=[means[t][part] for t in means], name=part, orientation="h"))
    fig.update_layout(title="Latency waterfall from Server-Timing (mean ms per tier)", barmode="stack",
                      xaxis_title="ms", height=320)
    return fig


def _queue_heatmap(samples: Sequence[Sample]) -> go.Figure | None:
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


def _timelines(samples: Sequence[Sample]) -> go.Figure | None:
    series: dict[str, list[tuple[float, float]]] = {}
    for smp in samples:
        engine = smp.name in ENGINE_SERIES
        if not (engine or smp.source.startswith("nvml") or smp.source == "bench"):
            continue
        key = f"{smp.name} ({smp.source})"
        series.setdefault(key, []).append((smp.t, smp.value))
    if not series:
        return None
    fig = go.Figure()
    for key, pts in sorted(series.items()):
        pts.sort()
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines", name=key))
    fig.update_layout(title="Engine, GPU and bench timelines", xaxis_title="s since start", height=420)
    return fig


def _knee_table(s: Summary) -> str:
    rows = [[t, _fmt(k.throughput), _fmt(k.latency), _fmt(k.goodput), k.used or "–", _fmt(k.value),
             _fmt(k.baseline_p95_s), k.note] for t, k in s.knees.items()]
    return _table(["tier", "throughput (a)", "latency (b)", "goodput (c)", "used", "knee req/s",
                   f"low-load p95 {s.knee_settings.metric} (s)", "note"], rows)


def _roi_table(s: Summary) -> str:
    rows = [[r.band, r.tier, str(r.steps), f"{r.offered_min:.3g}–{r.offered_max:.3g}", _fmt(r.achieved_rps),
             _fmt(r.p95_ttft_s), _fmt(r.p95_e2e_s), f"{r.error_rate:.1%}", _fmt(r.cost_per_1k, digits=4)]
            for r in s.roi]
    return _table(["band", "tier", "steps", "offered req/s", "achieved req/s", "p95 TTFT s", "p95 E2E s",
                   "errors", "cost / 1k req"], rows)


def _overall_table(s: Summary) -> str:
    rows = []
    for tier, g in s.overall.items():
        rows.append([tier, str(g.requests), str(g.ok), f"{g.error_rate:.1%}", f"{g.shed_rate:.1%}",
                     _fmt(g.achieved_rps), _fmt(g.output_tokens_per_s), _fmt(g.pct("ttft", "p50")),
                     _fmt(g.pct("ttft", "p99")), _fmt(g.pct("tpot", "p50")), _fmt(g.pct("e2e", "p95")),
                     _fmt(g.pct("lag", "p99"), 1000)])
    return _table(["tier", "requests", "ok", "errors", "shed", "req/s", "out tok/s", "TTFT p50", "TTFT p99",
                   "TPOT p50", "E2E p95", "lag p99 ms"], rows)


def render_report(summary: Summary, records: Sequence[RequestRecord], samples: Sequence[Sample]) -> str:
    """The whole report as one HTML string; plotly.js is inlined once, so it works offline."""
    figures: list[tuple[str, go.Figure | None, str]] = [
        ("latency", _latency_figure(summary), ""),
        ("throughput", _throughput_figure(summary), ""),
        ("distributions", _distribution_figure(records), ""),
        ("waterfall", _waterfall_figure(records), "No Server-Timing headers were received (target is not the "
                                                   "turbogate gateway)."),
        ("queue", _queue_heatmap(samples), "No gateway queue-depth series were scraped (add --scrape "
                                           "GATEWAY/metrics)."),
        ("timelines", _timelines(samples), "No engine or GPU series were collected (--scrape, --metrics)."),
    ]
    parts: list[str] = []
    first = True
    for name, fig, missing in figures:
        if fig is None:
            parts.append(f'<section id="{name}"><p class="note">{html.escape(missing)}</p></section>')
            continue
        div: Any = pio.to_html(fig, include_plotlyjs=first, full_html=False, div_id=f"fig-{name}",
                               config={"displaylogo": False})
        first = False
        parts.append(f'<section id="{name}">{div}</section>')
    cfg = html.escape(", ".join(f"{k}={v}" for k, v in summary.config.items()))
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in summary.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>turbogate {summary.kind} report</title>
<link rel="icon" href="data:,">
<style>body{{font-family:system-ui,sans-serif;margin:24px;max-width:1300px}}
table{{border-collapse:collapse;margin:8px 0 20px}}td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}
th{{background:#f3f3f3}}.note{{color:#666;font-style:italic}}code{{font-size:12px}}</style></head>
<body><h1>turbogate {html.escape(summary.kind)} report</h1>
<p>Started {html.escape(summary.started_at)} · {summary.duration_s:.1f} s · schema v{summary.schema_version}
{' · <b>interrupted</b>' if summary.interrupted else ''}</p>
<p><b>Recommendation:</b> {html.escape(summary.recommendation)}</p>
<h2>Knee per tier</h2>{_knee_table(summary)}
<h2>ROI by load band</h2>{_roi_table(summary)}
<h2>Overall</h2>{_overall_table(summary)}
{''.join(parts)}
<h2>Configuration</h2><p><code>{cfg}</code></p><ul>{notes}</ul>
</body></html>
"""


def render_compare(a: Summary, b: Summary, label_a: str = "A", label_b: str = "B") -> str:
    """An offline A/B page: p95 TTFT / E2E and achieved throughput against offered load, A solid, B dashed."""
    from turbogate.results.compare import compare

    fig = make_subplots(rows=1, cols=3, subplot_titles=("p95 TTFT (s)", "p95 E2E (s)", "achieved req/s"))
    for summary, label, dash in ((a, label_a, "solid"), (b, label_b, "dash")):
        for tier in summary.tiers:
            style = {"color": _color(tier), "dash": dash}
            for col, metric in ((1, "ttft"), (2, "e2e")):
                pts = [(x, y) for x, y in summary.latency_curve(tier, metric, "p95") if y is not None]
                fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                         name=f"{label} {tier}", legendgroup=f"{label} {tier}",
                                         showlegend=(col == 1), line=style), row=1, col=col)
            thr = summary.throughput_curve(tier)
            fig.add_trace(go.Scatter(x=[p[0] for p in thr], y=[p[1] for p in thr], mode="lines+markers",
                                     name=f"{label} {tier}", legendgroup=f"{label} {tier}", showlegend=False,
                                     line=style), row=1, col=3)
    fig.update_xaxes(title_text="offered load, all tiers (req/s)")
    fig.update_layout(title=f"{label_a} (solid) vs {label_b} (dashed)", height=460)
    rows = []
    for r in compare(a, b):
        d = r.delta_pct
        rows.append([r.tier, r.metric, _fmt(r.a, digits=4), _fmt(r.b, digits=4), "–" if d is None else f"{d:+.1f} %"])
    div = pio.to_html(fig, include_plotlyjs=True, full_html=False, div_id="fig-compare",
                      config={"displaylogo": False})
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>turbogate comparison</title><link rel="icon" href="data:,">
<style>body{{font-family:system-ui,sans-serif;margin:24px;max-width:1300px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}</style></head>
<body><h1>{html.escape(label_a)} ({a.kind}) vs {html.escape(label_b)} ({b.kind})</h1>{div}
{_table(["tier", "metric", label_a, label_b, "B vs A"], rows)}</body></html>
"""
