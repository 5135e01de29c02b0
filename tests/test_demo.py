"""``turbogate demo``'s conclusion (pure parts): the Turbo band from a run's knees, and hints in its own flags.

The demo's run on real processes is tests/bench/test_gateway.py::test_demo_runs_past_the_knee_and_cleans_up.
"""

from __future__ import annotations

import re
from dataclasses import replace

from turbogate.demo import DEMO_FLAGS, Band, band_line, demo_words, predict, turbo_band
from turbogate.results import ALL, RequestRecord, Step, Summary, summarize

CAPACITY = 20.0  # req/s the synthetic fleet completes; Turbo (a fifth) always gets through
RATES = (8.0, 12.0, 28.0, 40.0, 52.0)
STEP_S = 10.0


def _run(turbo_capacity: float = 1e9) -> Summary:
    steps, records = [], []
    rid = 0
    for k, rate in enumerate(RATES):
        t0 = k * STEP_S
        steps.append(Step(k, t0, t0 + STEP_S, rate))
        n = int(rate * STEP_S)
        turbo_seen = standard_seen = 0
        for j in range(n):
            turbo = j % 5 == 0
            s = t0 + j / rate
            if turbo:
                turbo_seen += 1
                shed = turbo_seen > turbo_capacity * STEP_S
            else:
                standard_seen += 1
                shed = standard_seen > (CAPACITY - min(rate / 5, turbo_capacity)) * STEP_S
            tier = "turbo" if turbo else "standard"
            records.append(RequestRecord(
                id=rid, step=k, offered_rps=rate, scheduled_s=s, sent_s=s, dispatch_lag_s=0.0, queue_s=0.0,
                end_s=s + (0.001 if shed else 0.5), tier_asked=tier, tier_served=None if shed else tier,
                status=503 if shed else 200, ok=not shed, error="shed" if shed else None,
                ttft_s=None if shed else 0.1, itl_s=(), tpot_s=None, e2e_s=None if shed else 0.5,
                prompt_tokens=None if shed else 256, output_tokens=None if shed else 128))
            rid += 1
    return summarize(records, steps, kind="bench", started_at="2026-01-01T00:00:00Z",
                     duration_s=len(RATES) * STEP_S, config={})


def test_turbo_holding_through_the_top_steps_closes_the_band() -> None:
    b = turbo_band(_run())
    assert b.low is not None and abs(b.low - CAPACITY) / CAPACITY < 0.1 and b.low_confidence in ("medium", "high")
    assert b.high_kind == "holds" and b.high == max(st.offered_rps for st in _run().steps)
    assert b.concluded
    line = band_line(b, 100)
    assert "Turbo holds through" in line and "Inconclusive" not in line


def test_turbo_that_degrades_gives_the_upper_end() -> None:
    b = turbo_band(_run(turbo_capacity=6.0))  # Turbo alone is 5.6, 8 and 10.4 req/s at the top steps
    assert b.high_kind == "degrades" and b.high is not None and 5.0 < b.high < 10.4 * 5


def test_a_run_without_a_knee_is_inconclusive_and_says_so_in_demo_flags() -> None:
    s = _run()
    no_knee = replace(s.knees[ALL], value=None, verdict="inconclusive", confidence=None,
                      note="steps too short; lengthen --step-duration or use --find-knee")
    b = turbo_band(replace(s, knees={**s.knees, ALL: no_knee}))
    assert not b.concluded
    line = band_line(b, 10)
    assert "Inconclusive" in line
    assert all(f in DEMO_FLAGS for f in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line)), line
    assert "--duration" in line


def test_demo_words_keeps_demo_flags_and_replaces_others() -> None:
    assert demo_words("Raise --time-scale. All fine.") == "Raise --time-scale. All fine."
    out = demo_words("Not enough. Use --qps-end past it; or --find-knee.")
    assert "--qps-end" not in out and "--find-knee" not in out and "--duration" in out


def test_sim_predicts_a_knee_below_the_perf_models_capacity() -> None:
    from turbogate.demo import REPLICAS, fleet_capacity

    s = predict(0.2)
    knee = s.knee()
    assert knee is not None and s.knees[ALL].confidence in ("medium", "high")
    assert 0.5 * fleet_capacity(REPLICAS, 1.0) < knee <= fleet_capacity(REPLICAS, 1.0)
    assert isinstance(turbo_band(s), Band)
