"""The self-contained offline ``report.html`` (plotly, JS inlined once; no CDN, no network)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from turbogate.results import figures
from turbogate.results.fmt import (
    fmt_cost,
    fmt_count,
    fmt_ms,
    fmt_num,
    fmt_pct,
    fmt_range,
    fmt_rate,
    fmt_signed_pct,
    fmt_value,
)
from turbogate.results.knee import METHOD_TEXT, method_cell
from turbogate.results.schema import ALL, RequestRecord, Sample
from turbogate.results.summary import Summary
from turbogate.results.tracefig import trace_figure


def _fmt(v: float | None, scale: float = 1.0, digits: int = 3) -> str:
    return fmt_num(None if v is None else v * scale, digits)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _knee_table(s: Summary) -> str:
    rows = [[t, k.verdict, _fmt(k.value), k.confidence or "–", method_cell(k, "throughput"),
             method_cell(k, "latency"), method_cell(k, "goodput"), k.used or "–", fmt_ms(k.baseline_p95_s), k.note]
            for t, k in s.knees.items()]
    return _table(["tier", "verdict", "knee req/s", "confidence", "throughput (a)", "latency (b)", "goodput (c)",
                   "used", f"low-load p95 {s.knee_settings.metric}", "why"], rows)


def _knee_methods(s: Summary) -> str:
    """How each method decides, with this run's thresholds, then the per-step evidence of the fleet."""
    ks = s.knee_settings
    items = "".join(f"<li><b>{html.escape(m)}</b> — {html.escape(METHOD_TEXT[m])}</li>" for m in METHOD_TEXT)
    text = (f"<p>A step votes only with ≥ {ks.min_requests} completed requests and ≤ {fmt_pct(ks.max_error_rate, 0)} "
            f"errors (shedding apart); a knee needs {ks.sustain} consecutive failing steps; shortfalls must exceed "
            f"{fmt_num(ks.z)} × the step-to-step noise measured at low load. Ratio level {fmt_pct(ks.ratio, 0)}, "
            f"latency k = {fmt_num(ks.k)} on p95 {html.escape(ks.metric)}. The knee used is the "
            f"<b>{html.escape(ks.method)}</b> method's; the others are shown for comparison.</p><ul>{items}</ul>")
    k = s.knees.get(ALL)
    if k is None or not k.evidence:
        return text
    rows = []
    for m, e in k.evidence.items():
        for v in e.steps:
            val = fmt_ms(v.value) if m == "latency" else fmt_pct(v.value)
            thr = fmt_ms(v.threshold) if m == "latency" else fmt_pct(v.threshold)
            rows.append([m, _fmt(v.offered_rps), val, thr, str(v.n), v.state])
    return text + "<details><summary>Per-step evidence (tier all)</summary>" + _table(
        ["method", "offered req/s", "value", "threshold", "n", "state"], rows) + "</details>"


def _unfinished_note(s: Summary) -> str:
    lines = []
    for st in s.steps:
        for tier, g in st.tiers.items():
            if g.unfinished:
                lines.append(f"{tier} at {fmt_num(st.offered_rps)} req/s: {g.unfinished} of {g.sent} still "
                             "running when the run ended (latency there is unknown where they exceed the "
                             "percentile's share, and not plotted)")
    if not lines:
        return ""
    return "<p class=\"note\">Unfinished requests: " + "; ".join(html.escape(x) for x in lines) + ".</p>"


def _roi_table(s: Summary) -> str:
    rows = [[r.band, r.tier, str(r.steps), fmt_range(r.offered_min, r.offered_max), fmt_rate(r.achieved_rps),
             r.p95("ttft"), r.p95("e2e"), fmt_pct(r.error_rate), fmt_cost(r.cost_per_1k)]
            for r in s.roi]
    return _table(["band", "tier", "steps", "offered", "achieved", "p95 TTFT", "p95 E2E",
                   "errors", "cost / 1k req"], rows)


def _overall_table(s: Summary) -> str:
    rows = []
    for tier, g in s.overall.items():
        rows.append([tier, fmt_count(g.requests), fmt_count(g.ok), f"{fmt_count(g.errors)} ({fmt_pct(g.error_rate)})",
                     fmt_pct(g.shed_rate), fmt_count(g.unfinished), fmt_rate(g.achieved_rps),
                     fmt_rate(g.output_tokens_per_s, "tok/s"),
                     fmt_ms(g.pct("ttft", "p50")), fmt_ms(g.pct("ttft", "p99")), fmt_ms(g.pct("tpot", "p50")),
                     fmt_ms(g.pct("e2e", "p95")), fmt_ms(g.pct("lag", "p99"))])
    return _table(["tier", "requests", "ok", "errors", "shed", "unfinished", "req/s", "out tok/s", "TTFT p50",
                   "TTFT p99", "TPOT p50", "E2E p95", "lag p99"], rows)


def render_report(summary: Summary, records: Sequence[RequestRecord], samples: Sequence[Sample]) -> str:
    """The whole report as one HTML string; plotly.js is inlined once, so it works offline."""
    figs: list[tuple[str, go.Figure | None, str]] = [
        *([("trace", trace_figure(summary, records), "")] if "trace" in summary.config else []),
        ("latency", figures.latency_figure(summary), ""),
        ("throughput", figures.throughput_figure(summary), ""),
        ("distributions", figures.distribution_figure(records), ""),
        ("waterfall", figures.waterfall_figure(records), "No Server-Timing headers were received (target is not the "
                                                   "turbogate gateway)."),
        ("queue", figures.queue_heatmap(samples), "No gateway queue-depth series were scraped (add --scrape "
                                           "GATEWAY/metrics)."),
        *([("layers", layers, "")] if (layers := figures.layer_heatmap(records)) is not None else []),
        ("timelines", figures.timelines(samples), "No engine or GPU series were collected (--scrape, --metrics)."),
    ]
    parts: list[str] = []
    first = True
    for name, fig, missing in figs:
        if fig is None:
            parts.append(f'<section id="{name}"><p class="note">{html.escape(missing)}</p></section>')
            continue
        div: Any = pio.to_html(fig, include_plotlyjs=first, full_html=False, div_id=f"fig-{name}",
                               config={"displaylogo": False})
        first = False
        parts.append(f'<section id="{name}">{div}</section>')
    cfg = html.escape(", ".join(f"{k}={fmt_value(v)}" for k, v in summary.config.items()))
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in summary.notes)
    warns = "".join(f'<p class="warn">⚠ {html.escape(w)}</p>' for w in summary.warnings)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>turbogate {summary.kind} report</title>
<link rel="icon" href="data:,">
<style>body{{font-family:system-ui,sans-serif;margin:24px;max-width:1300px}}
table{{border-collapse:collapse;margin:8px 0 20px}}td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}
th{{background:#f3f3f3}}.note{{color:#666;font-style:italic}}code{{font-size:12px}}
.warn{{background:#fff3cd;border:1px solid #e0b400;padding:6px 10px;font-weight:600}}</style></head>
<body><h1>turbogate {html.escape(summary.kind)} report</h1>
<p>Started {html.escape(summary.started_at)} · {fmt_num(summary.duration_s)} s · schema v{summary.schema_version}
{' · <b>interrupted</b>' if summary.interrupted else ''}</p>
{warns}
<p><b>Recommendation:</b> {html.escape(summary.recommendation)}</p>
<h2>Knee per tier</h2>{_knee_table(summary)}
<h3>How the knee is decided</h3>{_knee_methods(summary)}
<h2>ROI by load band</h2>{_roi_table(summary)}
<h2>Overall</h2>{_overall_table(summary)}{_unfinished_note(summary)}
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
            style = {"color": figures.color(tier), "dash": dash}
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
        rows.append([r.tier, r.metric, _fmt(r.a, digits=4), _fmt(r.b, digits=4),
                     fmt_signed_pct(None if d is None else d / 100)])
    div = pio.to_html(fig, include_plotlyjs=True, full_html=False, div_id="fig-compare",
                      config={"displaylogo": False})
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>turbogate comparison</title><link rel="icon" href="data:,">
<style>body{{font-family:system-ui,sans-serif;margin:24px;max-width:1300px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}</style></head>
<body><h1>{html.escape(label_a)} ({a.kind}) vs {html.escape(label_b)} ({b.kind})</h1>{div}
{_table(["tier", "metric", label_a, label_b, "B vs A"], rows)}</body></html>
"""
