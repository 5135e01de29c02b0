"""``turbogate demo``'s conclusion (pure parts): the Turbo band from a run's knees, and hints in its own flags.

The demo's run on real processes is tests/bench/test_gateway.py::test_demo_runs_past_the_knee_and_cleans_up.
"""

from __future__ import annotations

import re
from dataclasses import replace

from tests.bench.synthetic import held_steps
from turbogate.demo import DEMO_FLAGS, Band, band_line, demo_words, predict, turbo_band
from turbogate.results import ALL, Summary

CAPACITY = 20.0  # req/s the synthetic fleet completes; Turbo (a fifth) always gets through
RATES = (8.0, 12.0, 28.0, 40.0, 52.0)
STEP_S = 10.0


def _run(turbo_capacity: float = 1e9) -> Summary:
    """Held steps over RATES: a fifth Turbo, served up to ``turbo_capacity`` req/s; Standard gets the rest of
    CAPACITY req/s, the excess shed."""
    seen: dict[tuple[int, str], int] = {}

    def fate(k: int, j: int, rate: float) -> tuple[str, bool, float]:
        tier = "turbo" if j % 5 == 0 else "standard"
        seen[k, tier] = n = seen.get((k, tier), 0) + 1
        served = turbo_capacity if tier == "turbo" else CAPACITY - min(rate / 5, turbo_capacity)
        return tier, n > served * STEP_S, 0.0

    return held_steps(RATES, STEP_S, fate)


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
