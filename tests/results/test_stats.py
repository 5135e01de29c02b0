"""Statistics, knee, ROI and the run folder on synthetic runs of known shape."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.results.helpers import saturating_run
from turbogate.results import (
    ALL,
    SCHEMA_VERSION,
    SLO,
    CostConfig,
    KneeSettings,
    RequestRecord,
    compare,
    load_run,
    stream_timing,
    summarize,
    tpot,
    write_run,
)
from turbogate.results.stats import fill_time


def test_stream_timing_follows_vllm_definitions() -> None:
    # sent at 10.0; a role-only chunk (no output) at 10.05, tokens at 10.2, 10.25, 10.4, usage at 10.45
    chunks = [(10.05, False), (10.2, True), (10.25, True), (10.4, True), (10.45, False)]
    t = stream_timing(10.0, chunks)
    assert t.ttft_s == pytest.approx(0.2)
    assert t.itl_s == pytest.approx((0.05, 0.15))
    assert t.e2e_s == pytest.approx(0.45)
    assert tpot(t.e2e_s, t.ttft_s, 3) == pytest.approx((0.45 - 0.2) / 2)
    assert tpot(0.5, 0.2, 1) is None
    assert stream_timing(1.0, []).ttft_s is None


def test_slo_needs_every_objective() -> None:
    records, _, _ = saturating_run()
    r = next(r for r in records if r.ok)
    assert SLO().met_by(r)
    assert SLO(ttft_s=r.ttft_s, e2e_s=r.e2e_s).met_by(r)
    assert not SLO(ttft_s=r.ttft_s, e2e_s=(r.e2e_s or 0) * 0.99).met_by(r)
    bad = next(r for r in records if not r.ok)
    assert not SLO().met_by(bad)


def test_summary_equals_recomputation() -> None:
    records, steps, _ = saturating_run()
    slo = SLO(ttft_s=0.5)
    s = summarize(records, steps, kind="sim", started_at="2026-01-01T00:00:00+00:00", duration_s=70.0,
                  config={}, slo=slo)
    shift = float(np.median([r.e2e_s for r in records if r.step == 0 and r.ok]))
    assert fill_time(records, steps) == pytest.approx(shift)
    for st in s.steps:
        for tier in ("turbo", "standard", ALL):
            mine = [r for r in records if r.step == st.step.index and (tier == ALL or r.tier_asked == tier)]
            lead = float(np.median([r.end_s - r.scheduled_s for r in mine if r.ok]))
            lo, hi = st.step.start_s + lead, st.step.end_s + lead
            g = st.tiers[tier]
            assert g.requests == len(mine)
            assert g.errors == sum(1 for r in mine if not r.ok)
            assert g.shed == sum(1 for r in mine if r.status == 429)
            ttft = [r.ttft_s for r in mine if r.ok]
            assert g.pct("ttft", "p95") == pytest.approx(float(np.percentile(ttft, 95)))
            assert g.pct("e2e", "p50") == pytest.approx(float(np.percentile([r.e2e_s for r in mine if r.ok], 50)))
            itl = [x for r in mine if r.ok for x in r.itl_s]
            assert g.pct("itl", "p99") == pytest.approx(float(np.percentile(itl, 99)))
            done = [r for r in records if r.ok and (tier == ALL or r.tier_asked == tier) and lo <= r.end_s < hi]
            assert g.achieved_rps == pytest.approx(len(done) / 10.0)
            assert g.goodput_rps == pytest.approx(sum(1 for r in done if r.ttft_s <= 0.5) / 10.0)
            assert g.output_tokens_per_s == pytest.approx(sum(r.output_tokens for r in done) / 10.0)


def test_knee_methods_on_a_known_capacity() -> None:
    records, steps, _ = saturating_run(capacity=20.0)
    s = summarize(records, steps, kind="sim", started_at="x", duration_s=70.0, config={},
                  slo=SLO(e2e_s=1.5), knee_settings=KneeSettings(method="throughput"))
    k = s.knees[ALL]
    assert k.used == "throughput"
    # Achieved stays at ~20 req/s (minus 2 % shed) while offered goes 25, 30, 40: the 95 % line is
    # crossed between the 20 and 25 req/s steps.
    assert k.throughput is not None and 20.0 <= k.throughput <= 25.0
    assert k.latency is not None and 20.0 <= k.latency <= 30.0
    assert k.goodput is not None and 15.0 <= k.goodput <= 25.0
    assert k.value == k.throughput
    lat = summarize(records, steps, kind="sim", started_at="x", duration_s=70.0, config={},
                    knee_settings=KneeSettings(method="latency"))
    assert lat.knees[ALL].used == "latency"


def test_no_knee_when_the_target_keeps_up() -> None:
    records, steps, _ = saturating_run(capacity=1000.0, rates=(5, 10, 20))
    s = summarize(records, steps, kind="bench", started_at="x", duration_s=30.0, config={})
    assert s.knees[ALL].value is None and s.knees[ALL].used is None
    assert "No knee" in s.recommendation


def test_roi_bands_and_cost() -> None:
    records, steps, _ = saturating_run(capacity=20.0)
    cost = CostConfig(fleet_cost_per_hour=36.0, tier_weights={"turbo": 3.0, "standard": 1.0})
    s = summarize(records, steps, kind="sim", started_at="x", duration_s=70.0, config={}, cost=cost)
    bands = {r.band for r in s.roi}
    assert bands == {"below", "around", "above"}
    for band in bands:
        rows = {r.tier: r for r in s.roi if r.band == band}
        t, st = rows["turbo"], rows["standard"]
        assert t.cost_per_1k is not None and st.cost_per_1k is not None
        assert t.cost_per_1k == pytest.approx(3.0 * st.cost_per_1k)
        # The fleet's cost is fully split: Σ cost/request × throughput = cost per second.
        spent = (t.cost_per_1k * t.achieved_rps + st.cost_per_1k * st.achieved_rps) / 1000
        assert spent == pytest.approx(36.0 / 3600)


def test_write_and_load_round_trip(tmp_path: Path) -> None:
    records, steps, samples = saturating_run()
    s = summarize(records, steps, kind="bench", started_at="2026-01-01T00:00:00+00:00", duration_s=70.0,
                  config={"label": "x"}, slo=SLO(ttft_s=0.3))
    write_run(tmp_path, records, samples, s, report=False)
    run = load_run(tmp_path)
    assert run.kind == "bench"
    assert run.requests == records
    assert run.samples == samples
    assert run.summary.to_dict() == s.to_dict()
    assert run.summary.latency_curve("turbo")[0][0] == 5.0
    assert run.summary.knee() == s.knees[ALL].value
    with (tmp_path / "summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(steps) * 3
    raw = orjson.loads((tmp_path / "summary.json").read_bytes())
    assert raw["schema_version"] == SCHEMA_VERSION
    raw["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "summary.json").write_bytes(orjson.dumps(raw))
    with pytest.raises(ValueError, match="schema_version"):
        load_run(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_run(tmp_path / "missing")


def test_compare_two_runs() -> None:
    a_recs, steps, _ = saturating_run(capacity=20.0)
    b_recs, _, _ = saturating_run(capacity=24.0)  # 30 and 40 fall short: two steps, a knee
    a = summarize(a_recs, steps, kind="bench", started_at="x", duration_s=70.0, config={})
    b = summarize(b_recs, steps, kind="sim", started_at="x", duration_s=70.0, config={})
    rows = {(r.tier, r.metric): r for r in compare(a, b)}
    knee = rows[(ALL, "knee req/s")]
    assert knee.a is not None and knee.b is not None and knee.b > knee.a
    assert knee.delta_pct == pytest.approx((knee.b - knee.a) / knee.a * 100)


def test_one_load_level_has_no_knee() -> None:
    records, steps, _ = saturating_run(capacity=10.0, rates=(20,))
    s = summarize(records, steps, kind="bench", started_at="x", duration_s=10.0, config={})
    k = s.knees[ALL]
    assert k.value is None and k.throughput is None and "two load steps" in k.note
    assert s.recommendation.startswith("One load level only")


def test_offered_is_what_was_scheduled_in_the_step() -> None:
    records, steps, _ = saturating_run()
    s = summarize(records, steps, kind="bench", started_at="x", duration_s=70.0, config={})
    for st in s.steps:
        n = sum(1 for r in records if r.step == st.step.index and r.tier_asked == "turbo")
        assert st.tiers["turbo"].offered_rps == pytest.approx(n / st.step.duration_s)


def test_unsent_steps_of_an_interrupted_run_are_left_out() -> None:
    records, steps, _ = saturating_run(capacity=1000.0, rates=(5, 10, 20, 40))
    # Stopped during the third step: nothing after t = 25 s was sent.
    cut = [r if r.scheduled_s < 25 else RequestRecord.from_dict({**r.to_dict(), "sent_s": None, "end_s": None,
                                                                   "ok": False, "status": None, "error": "not sent"})
           for r in records]
    s = summarize(cut, steps, kind="bench", started_at="x", duration_s=25.0, config={}, interrupted=True)
    # Offered as realized: the cut step holds the requests scheduled before the stop over its cut width.
    assert [x for x, _ in s.latency_curve(ALL)] == pytest.approx([5.0, 10.0, 20.0], rel=0.01)
    assert s.knees[ALL].value is None  # the unsent 40 req/s step does not count as a collapse
    assert max(r.offered_max for r in s.roi) == pytest.approx(20.0, rel=0.01)
