"""The report's figure of a replayed trace: its arrival rate over time against the fleet's knee, and
each tier's TTFT over time (p50 and p95 per time bin), on one shared time axis."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from turbogate.results.figures import color, log_ticks
from turbogate.results.fmt import fmt_num
from turbogate.results.percentile import percentile
from turbogate.results.schema import ALL, RequestRecord
from turbogate.results.stats import tier_key
from turbogate.results.summary import Summary

#: Time bins across the replay: enough to show a burst, few enough for a percentile per bin.
BINS = 60


def trace_figure(s: Summary, records: Sequence[RequestRecord]) -> go.Figure | None:
    """None when the run replayed no trace (its config has no ``trace``) or has no records."""
    if "trace" not in s.config or not records:
        return None
    end = max(r.scheduled_s for r in records)
    width = max(end / BINS, 1e-3)
    n = int(end / width) + 1
    arrivals = [0] * n
    ttft: dict[str, list[list[float]]] = {}
    for r in records:
        i = min(n - 1, int(r.scheduled_s / width))
        arrivals[i] += 1
        if r.ok and r.ttft_s is not None:
            for key in (tier_key(r), ALL):
                ttft.setdefault(key, [[] for _ in range(n)])[i].append(r.ttft_s)
    xs = [(i + 0.5) * width for i in range(n)]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("Arrival rate of the replayed trace", "TTFT over time, per tier"))
    fig.add_trace(go.Bar(x=xs, y=[a / width for a in arrivals], name="arrivals (req/s)", width=width,
                         marker={"color": "#999999"}), row=1, col=1)
    knee = s.knees.get(ALL)
    if knee is not None and knee.value is not None:
        fig.add_trace(go.Scatter(x=[0, end], y=[knee.value, knee.value], mode="lines", name=f"fleet knee: "
                                 f"{fmt_num(knee.value)} req/s", line={"color": "#000000", "dash": "dashdot"}),
                      row=1, col=1)
    else:
        verdict = "the fleet kept up at every step" if knee is not None and knee.verdict == "none" else (
            f"knee {knee.verdict}" if knee is not None else "no knee judged")
        fig.add_annotation(text=f"no knee value in this run: {verdict}", showarrow=False,
                           xref="x domain", yref="y domain", x=0.99, y=0.98, xanchor="right", row=1, col=1)
    seen: list[float] = []
    for tier, bins in sorted(ttft.items(), key=lambda kv: kv[0] == ALL):
        for stat, dash in (("p50", "dot"), ("p95", "solid")):
            ys = [percentile(b, 50 if stat == "p50" else 95) for b in bins]
            seen += [y for y in ys if y is not None]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{tier} TTFT {stat}", legendgroup=tier,
                                     connectgaps=False, line={"color": color(tier), "dash": dash}), row=2, col=1)
    fig.update_yaxes(title_text="req/s", row=1, col=1)
    fig.update_yaxes(title_text="TTFT", type="log", row=2, col=1, **log_ticks(seen))
    fig.update_xaxes(title_text="replay time (s)", row=2, col=1)
    fig.update_layout(title="The trace as replayed: load against the knee, and what each tier waited", height=640)
    return fig
