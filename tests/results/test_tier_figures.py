"""Charts that show Turbo: per-tier TTFT on a scale where every tier is visible; timelines told apart (issue 42)."""

from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from turbogate.results import RequestRecord, Sample, Step, summarize, write_run
from turbogate.results.figures import distribution_figure, layer_heatmap, timelines, waterfall_figure

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from check_report import check, find_chromium  # noqa: E402


def two_tier_run(n: int = 400, seed: int = 3) -> tuple[list[RequestRecord], list[Step]]:
    """Turbo answers in ~50 ms; Standard waits in a queue from 50 ms up to 20 s (the issue's shapes)."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        tier = "turbo" if i % 5 == 0 else "standard"
        ttft = 0.045 + rng.random() * 0.015 if tier == "turbo" else 0.05 + rng.random() ** 2 * 20.0
        t = i * 0.1
        records.append(RequestRecord(
            id=i, step=0, offered_rps=10.0, scheduled_s=t, sent_s=t, dispatch_lag_s=0.0, queue_s=0.0,
            end_s=t + ttft + 1.0, tier_asked=tier, tier_served=tier, status=200, ok=True, error=None, ttft_s=ttft,
            itl_s=(0.02,) * 15, tpot_s=0.02, e2e_s=ttft + 1.0, prompt_tokens=100, output_tokens=16,
            server_timing_ms={"l1": 0.3, "l2": 0.1, "upstream": 900.0}))
    return records, [Step(0, 0.0, n * 0.1, 10.0)]


def _share_of_axis(values: list[float], axis_range: tuple[float, float]) -> float:
    """How much of its axis the middle 98 % of a tier's (log10) values spans."""
    xs = sorted(values)
    lo, hi = xs[int(0.01 * len(xs))], xs[int(0.99 * len(xs)) - 1]
    return (hi - lo) / (axis_range[1] - axis_range[0])


def test_each_tiers_ttft_fills_its_own_log_panel() -> None:
    records, _ = two_tier_run()
    fig = distribution_figure(records)
    layout = fig.to_plotly_json()["layout"]
    ttft = [t for t in fig.data if t.xaxis in ("x", "x3")]  # the left column; TPOT is the right one
    assert [t.name for t in ttft] == ["turbo", "standard"]
    for trace in ttft:
        axis = layout["xaxis" + trace.xaxis[1:]]
        share = _share_of_axis(list(trace.x), tuple(axis["range"]))
        assert share > 0.5, (trace.name, trace.xaxis, share)
    for trace in fig.data:
        assert all("e" not in t for t in layout["xaxis" + trace.xaxis[1:]]["ticktext"])  # durations, no exponents
    turbo_ttft = next(t for t in fig.data if t.name == "turbo" and t.xaxis == "x")
    lo, hi = (10 ** v for v in layout["xaxis"]["range"])
    assert 0.02 < lo < 0.045 < 0.06 < hi < 0.12  # Turbo's panel spans Turbo's tens of ms
    assert len(turbo_ttft.x) == 80
    # On the old shared linear axis (0 to Standard's 20 s) the same values spanned under 0.1 % of it.
    assert (0.06 - 0.045) / 20.05 < 0.001


def test_timeline_series_are_told_apart_and_grouped_by_replica() -> None:
    samples = [Sample(float(t), f"http://127.0.0.1:{8000 + r}/metrics", name, float(t % 7))
               for r in range(3) for t in range(20)
               for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                            "turbogate_emulator_kv_fragmentation")]
    samples += [Sample(float(t), "bench", "bench_in_flight", 3.0) for t in range(20)]
    fig = timelines(samples)
    assert fig is not None and len(fig.data) == 13
    styles = [(t.line.color, t.line.dash) for t in fig.data]
    assert len(set(styles)) == len(styles)  # no two series look alike
    by_replica: dict[str, set[str]] = {}
    for t in fig.data:
        by_replica.setdefault(t.legendgroup, set()).add(t.line.color)
    assert all(len(colors) == 1 for colors in by_replica.values())  # one replica, one colour
    assert "127.0.0.1:8001" in by_replica


PROBE = """(() => {
  const d = document.getElementById('fig-distributions');
  return d._fullData.filter(t => t.type === 'histogram').map(t => {
    const ax = d._fullLayout['xaxis' + t.xaxis.slice(1)];
    const xs = Array.from(t.x).sort((a, b) => a - b);
    const lo = xs[Math.floor(0.01 * xs.length)], hi = xs[Math.floor(0.99 * xs.length) - 1];
    return {name: t.name, xaxis: t.xaxis, range: ax.range, px: (hi - lo) / (ax.range[1] - ax.range[0]) * ax._length};
  });
})()"""


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (apt install chromium)")
def test_a_two_tier_report_in_chromium_shows_turbos_ttft_as_more_than_a_sliver(tmp_path: Path) -> None:
    records, steps = two_tier_run()
    summary = summarize(records, steps, kind="bench", started_at="2026-12-04T00:00:00+00:00", duration_s=40.0,
                        config={})
    write_run(tmp_path, records, [], summary)
    shot = tmp_path / "report.png"
    result = check(tmp_path / "report.html", str(find_chromium()), timeout=90.0, screenshot=shot, probe=PROBE)
    assert result["errors"] == [], result["errors"]
    assert shot.stat().st_size > 50_000
    drawn = {(p["name"], p["xaxis"]): p for p in result["probe"]}
    turbo = drawn[("turbo", "x")]
    # The middle 98 % of Turbo's TTFTs covers a wide stretch of its drawn axis, not a one-pixel sliver.
    assert turbo["px"] > 150, turbo
    print(json.dumps({f"{name} {axis}": round(v["px"]) for (name, axis), v in drawn.items()}))


def test_the_waterfall_shows_l3_and_l4_in_the_layers_order_when_requests_carried_them() -> None:
    records, _ = two_tier_run(n=50)
    with_layers = [replace(r, server_timing_ms={"l1": 1.0, "l2": 0.1, "upstream": 900.0, "l3": 12.0, "l4": 40.0})
                   for r in records]
    fig = waterfall_figure(with_layers)
    assert fig is not None
    assert [t.name for t in fig.data] == ["L4 job: waiting for its steps", "L1 queue", "L3 pool round trip",
                                          "L2 replica pick", "upstream", "client + rest"]
    l3 = next(t for t in fig.data if t.name == "L3 pool round trip")
    assert list(l3.x) == pytest.approx([12.0, 12.0])
    plain = waterfall_figure(records)  # no L3, no L4: no such segments
    assert plain is not None and all("L3" not in t.name and "L4" not in t.name for t in plain.data)


def test_the_layer_heatmap_has_a_row_per_layer_when_requests_carried_l3_or_l4(tmp_path: Path) -> None:
    records, steps = two_tier_run(n=50)
    assert layer_heatmap(records) is None  # L1 and L2 only: the waterfall already shows them
    with_layers = [replace(r, server_timing_ms={"l1": 1.0, "l2": 0.1, "upstream": 900.0, "l3": 12.0,
                                                **({"l4": 40.0} if r.id % 2 else {})}) for r in records]
    fig = layer_heatmap(with_layers)
    assert fig is not None
    assert list(fig.data[0].y) == ["L4 job: waiting for its steps", "L1 queue", "L3 pool round trip",
                                   "L2 replica pick"]
    l3_row = fig.data[0].z[2]
    assert all(v == pytest.approx(12.0) for v in l3_row if v is not None)
    summary = summarize(with_layers, steps, kind="bench", started_at="2026-12-04T00:00:00+00:00", duration_s=5.0,
                        config={})
    write_run(tmp_path, with_layers, [], summary)
    assert 'id="fig-layers"' in (tmp_path / "report.html").read_text()
