"""The knee's evidence rules on hand-made curves: noise, sustain, thin steps, errors, censoring, round trips."""

from __future__ import annotations

import pytest

from tests.results.helpers import saturating_run
from turbogate.results import ALL, SLO, KneeSettings, Step, summarize
from turbogate.results.fmt import fmt_ms, fmt_num, fmt_pct, fmt_signed_pct, fmt_value
from turbogate.results.knee import Knee, detect_knee, probe_state
from turbogate.results.roi import gap_words
from turbogate.results.stats import Dist, GroupStats, StepStats


def steps_of(rows: list[tuple[float, float]], duration: float = 10.0, p95: list[float] | None = None,
             error_share: float = 0.0, unfinished: int = 0) -> list[StepStats]:
    """Steps from (offered req/s, achieved req/s) pairs; the p95 E2E per step when given."""
    out = []
    for i, (offered, achieved) in enumerate(rows):
        n = round(offered * duration)
        errors = round(error_share * n)
        lat = {"e2e": Dist(n, 0.5, 0.4, 0.5, (p95 or [0.5] * len(rows))[i], 0.6, 0.7)}
        g = GroupStats(requests=n, sent=n, ok=n - errors - unfinished, errors=errors, shed=0,
                       error_rate=errors / n, shed_rate=0.0, offered_rps=offered, achieved_rps=achieved,
                       goodput_rps=achieved, input_tokens_per_s=0.0, output_tokens_per_s=0.0, latency=lat,
                       unfinished=unfinished)
        out.append(StepStats(Step(i, i * duration, (i + 1) * duration, offered), {ALL: g}))
    return out


def test_a_sustained_shortfall_is_a_knee_at_the_plateau() -> None:
    k = detect_knee(steps_of([(5, 5), (10, 10), (15, 15), (20, 18), (25, 18), (30, 18)]), ALL)
    assert k.verdict == "knee" and k.used == "throughput"
    assert k.value == pytest.approx(18.0)  # what the target completed while saturated
    ev = k.evidence["throughput"]
    assert ev.crossing == pytest.approx(17.5)  # 15 → 1.0, 20 → 0.9: the 95 % level crossed halfway
    assert [v.state for v in ev.steps] == ["ok", "ok", "ok", "fail", "fail", "fail"]
    assert ev.level == 0.95 and ev.confidence == "high" and all(v.threshold is not None for v in ev.steps)


def test_one_short_step_is_noise_not_a_knee() -> None:
    # The false knee of a short linear ramp: one step falls 10 % short, the next keeps up again.
    k = detect_knee(steps_of([(5, 5), (10, 10), (15, 13.5), (20, 20), (25, 25)]), ALL)
    assert k.value is None and k.verdict == "none"
    assert "isolated shortfall at 15" in k.note


def test_only_the_top_step_short_is_inconclusive() -> None:
    k = detect_knee(steps_of([(5, 5), (10, 10), (15, 15), (20, 15)]), ALL)
    assert k.value is None and k.verdict == "inconclusive" and "--qps-end" in k.note


def test_short_steps_are_inconclusive_and_say_what_to_change() -> None:
    k = detect_knee(steps_of([(1, 1), (2, 2), (3, 2.5)], duration=3.0), ALL)
    assert k.verdict == "inconclusive"
    assert "too few requests" in k.note and "--step-duration" in k.note and "--find-knee" in k.note


def test_noisy_low_load_raises_the_bar() -> None:
    # Low-load steps scatter ±8 %: a later 8 % shortfall is within that noise, a 40 % one is not.
    noisy = [(10, 9.2), (11, 11.9), (12, 11.0), (13, 12.0), (14, 12.9), (15, 13.8)]
    k = detect_knee(steps_of(noisy, duration=5.0), ALL)
    assert k.value is None, k.evidence["throughput"].steps
    assert k.evidence["throughput"].noise is not None and k.evidence["throughput"].noise > 0.3
    k = detect_knee(steps_of([*noisy, (20, 12), (25, 12)], duration=5.0), ALL)
    assert k.verdict == "knee" and k.value == pytest.approx(15.0)  # plateau 12, but 15 was kept up


def test_a_broken_run_is_not_a_saturated_one() -> None:
    rows = [(5, 0.0), (10, 0.0), (15, 0.0)]
    k = detect_knee(steps_of(rows, error_share=1.0), ALL)  # every request got HTTP 401
    assert k.value is None and k.verdict == "inconclusive" and "errors" in k.note


def test_latency_method_and_censored_steps() -> None:
    rows = [(5, 5), (10, 10), (15, 15), (20, 20), (25, 25)]
    s = KneeSettings(method="latency")
    k = detect_knee(steps_of(rows, p95=[0.5, 0.52, 0.55, 1.6, 3.0]), ALL, s)
    assert k.verdict == "knee" and k.used == "latency" and 15 < (k.value or 0) < 20
    # The top step's p95 is unknown (requests still running): it counts as beyond the level, not as a recovery.
    steps = steps_of(rows, p95=[0.5, 0.52, 0.55, 1.6, 3.0])
    top = steps[-1].tiers[ALL]
    steps[-1] = StepStats(steps[-1].step, {ALL: GroupStats(**{
        **{f: getattr(top, f) for f in GroupStats.__slots__},  # type: ignore[attr-defined]
        "latency": {"e2e": Dist(10, None, 0.5, None, None, None, None)}, "unfinished": 40})})
    k = detect_knee(steps, ALL, s)
    assert k.verdict == "knee" and k.evidence["latency"].steps[-1].state == "fail"


def test_goodput_needs_slos() -> None:
    records, steps, _ = saturating_run(capacity=20.0)
    off = summarize(records, steps, kind="sim", started_at="x", duration_s=70.0, config={})
    assert off.knees[ALL].evidence["goodput"].verdict == "off"
    on = summarize(records, steps, kind="sim", started_at="x", duration_s=70.0, config={}, slo=SLO(e2e_s=1.5),
                   knee_settings=KneeSettings(method="goodput"))
    k = on.knees[ALL]
    assert k.used == "goodput" and k.value is not None and 15 <= k.value <= 25


def test_evidence_round_trips_and_v1_knees_still_read() -> None:
    records, steps, _ = saturating_run(capacity=20.0)
    s = summarize(records, steps, kind="sim", started_at="x", duration_s=70.0, config={})
    k = s.knees[ALL]
    assert Knee.from_dict(k.to_dict()) == k
    v1 = {"tier": "all", "throughput": 21.0, "latency": None, "goodput": None, "used": "throughput",
          "value": 21.0, "baseline_p95_s": 0.5, "note": ""}
    old = Knee.from_dict(v1)
    assert old.verdict == "knee" and old.value == 21.0 and old.evidence == {}


def test_find_knee_probes_are_judged_like_the_summary() -> None:
    probes = steps_of([(10, 10), (15, 15), (22.5, 18)])
    assert probe_state(probes, 2, ALL, KneeSettings(), slo_set=False) == "fail"
    assert probe_state(probes[:2], 1, ALL, KneeSettings(), slo_set=False) == "ok"
    # A bisection probe run last but lower than the others is judged as itself, not as the highest probe.
    bisect = [*probes, StepStats(Step(3, 40.0, 50.0, 12.5), steps_of([(12.5, 12.5)])[0].tiers)]
    assert probe_state(bisect, 3, ALL, KneeSettings(), slo_set=False) == "ok"
    summary_states = [v.state for v in detect_knee(bisect, ALL).evidence["throughput"].steps]
    assert summary_states == ["ok", "ok", "ok", "fail"]


def test_lagging_bench_is_a_warning_and_lowers_confidence() -> None:
    records, steps, _ = saturating_run(capacity=20.0)
    s = summarize(records, steps, kind="bench", started_at="x", duration_s=70.0, config={}, max_lag_s=0.0001)
    assert any("load generator was the bottleneck" in w for w in s.warnings)
    assert s.knees[ALL].confidence == "low"
    quiet = summarize(records, steps, kind="bench", started_at="x", duration_s=70.0, config={})
    assert quiet.warnings == () and quiet.knees[ALL].confidence != "low"


def test_readable_numbers() -> None:
    assert fmt_num(1000.0) == "1,000" and fmt_num(3190.4) == "3,190" and fmt_num(16.43) == "16.4"
    assert fmt_num(0.01234) == "0.0123" and "e" not in fmt_num(1e-7) and fmt_num(None) == "–"
    assert fmt_pct(-0.00001) == "0.0 %" and fmt_signed_pct(-0.00001) == "0.0 %" and fmt_signed_pct(5.07) == "+507.0 %"
    assert fmt_ms(0.0734) == "73 ms" and fmt_ms(2.44) == "2.4 s" and fmt_ms(0.00412) == "4.1 ms"
    assert fmt_value({"a": 0.30000000000000004, "b": [1.234567891]}) == "{a: 0.3, b: [1.235]}"


def test_recommendation_words_follow_the_numbers() -> None:
    assert gap_words(0.064, 0.315).startswith("4.9× lower p95 TTFT (64 ms vs 315 ms)")
    assert gap_words(0.074, 0.074).startswith("about the same p95 TTFT")
    assert gap_words(0.2, 0.1).startswith("2× higher")
    assert gap_words(0.087, 9.0, standard_at_least=True).startswith("≥ 103× lower")
    records, steps, _ = saturating_run(capacity=20.0)
    text = summarize(records, steps, kind="sim", started_at="x", duration_s=70.0, config={}).recommendation
    assert "little" not in text and "knee guard" not in text


def test_a_schema_1_summary_still_loads() -> None:
    from turbogate.results.summary import Summary

    records, steps, _ = saturating_run(capacity=20.0)
    d = summarize(records, steps, kind="sim", started_at="x", duration_s=70.0, config={}).to_dict()
    d["schema_version"] = 1
    for key in ("warnings",):
        d.pop(key)
    for k in d["knees"].values():
        for key in ("verdict", "confidence", "evidence"):
            k.pop(key)
    for st in d["steps"]:
        for g in st["tiers"].values():
            g.pop("unfinished")
    old = Summary.from_dict(d)
    assert old.schema_version == 1 and old.knee(ALL) == d["knees"][ALL]["value"] and old.warnings == []


def test_a_ramp_transient_before_capacity_does_not_set_the_knee() -> None:
    # Queue growth on a ramp makes the step just below capacity fall short; the saturated steps then
    # complete ≈ 3.4 req/s: the plateau, not the first shortfall (2.67), is the knee.
    rows = [(2.17, 2.17), (2.42, 2.42), (2.67, 2.25), (4.08, 2.92), (4.42, 3.42), (4.75, 3.42), (5.5, 3.42)]
    k = detect_knee(steps_of(rows, duration=12.0), ALL)
    assert k.verdict == "knee" and k.value == pytest.approx(3.42)
    assert k.evidence["throughput"].crossing is not None and k.evidence["throughput"].crossing < 2.7
