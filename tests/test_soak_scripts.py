"""benchmarks/overload_soak.py's recovery measure (issue 43, benchmarks/soak_measure.py) says what
it counts: the strict recovery (every later window within 2x), the first window back, how often
later windows are slow against how often they are with no burst at all, and the recovery beyond
what the same load has without the burst.  Virtual time only: no process, no clock."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def soak(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    import soak_measure

    return soak_measure


def test_later_slow_windows_are_counted_against_the_steady_share(soak: ModuleType) -> None:
    """Standard at 2/s, 2x limit 0.1 s; slow (0.5 s) requests sent 2 s and 30 s after the burst's
    end: the first window back starts after the first slow one, the late one spoils the strict
    recovery, and the share of later windows it spoils is reported beside the steady share."""
    end, until = 100.0, 160.0
    sent = [(end + k * 0.5, "standard", 0.05) for k in range(120)]
    sent += [(end + 2.0, "standard", 0.5), (end + 30.0, "standard", 0.5)]
    recovery, first, slow, later = soak.recovery_s(sent, "standard", end, until, 0.1)
    assert first == 2.5  # the first window that no longer holds the 2-s request
    assert slow == [[26.5, 30.0]] and recovery == 30.5
    after = soak.window_verdicts(sent, "standard", end + first, until, 0.1)[1:]
    assert later == soak.slow_share(after) and 0 < later < 0.1


def test_steady_share_from_the_windows_before_the_burst_without_a_control_run(soak: ModuleType) -> None:
    """A slow request before the burst makes some of the windows before it slow: that is the steady
    share a real run (no control run) sets later windows against; an unanswered request counts."""
    sent = [(k * 0.25, "standard", 0.05) for k in range(80)] + [(5.0, "standard", math.inf)]
    sent += [(20.0 + k * 0.25, "standard", 0.05) for k in range(160)]
    fig = soak.burst_figures(sent, 20.0, 20.0, 60.0)
    assert fig["steady_from"] == "before_burst"
    assert fig["slow_share_steady"]["standard"] == fig["slow_share_before_burst"]["standard"] > 0
    assert fig["slow_share_after_back"]["standard"] == 0.0
    assert fig["pass"]["standard_back_within_10s_at_steady_rate"]


def test_recovery_beyond_steady_excuses_only_the_slow_windows_the_control_shares(soak: ModuleType) -> None:
    """A slow request 30 s after the burst that the run without the burst has too (sent 0.3 s
    apart: a real machine's timing) is the load's own; one 40 s after it that the control lacks is
    not, and sets the recovery beyond steady; the strict recovery counts both."""
    end, until = 100.0, 160.0
    calm = [(end + k * 0.5, "standard", 0.05) for k in range(120)]
    before = [(k * 0.5, "standard", 0.05) for k in range(200)]
    steady = before + calm + [(end + 30.3, "standard", 0.5)]
    shared = before + calm + [(end + 30.0, "standard", 0.5)]
    fig = soak.burst_figures(shared, end, end, until, steady)
    assert fig["recovery_s"]["standard"] == 30.5 and fig["recovery_beyond_steady_s"]["standard"] == 0.0
    assert fig["pass"]["standard_within_10s_beyond_steady"] and not fig["pass"]["standard_within_10s"]
    own = [*shared, (end + 40.0, "standard", 0.5)]
    fig = soak.burst_figures(own, end, end, until, steady)
    assert fig["recovery_beyond_steady_s"]["standard"] == 40.5
    assert not fig["pass"]["standard_within_10s_beyond_steady"]


@pytest.mark.parametrize("args", [("--simulate", "1", "--fleet", "2xL4", "--mix", "issue"), ("--replay", "1")])
def test_simulated_burst_reports_both_measures_and_its_definition(args: tuple[str, ...]) -> None:
    out = subprocess.run([sys.executable, str(BENCH / "overload_soak.py"), *args], check=True, capture_output=True,
                         text=True, timeout=240)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    fig = json.loads(lines[0])
    assert fig["steady_from"] == "no_burst_run" and "strict" in fig["recovery_definition"]
    assert set(fig["slow_without_burst_s"]) == {"turbo", "standard", "relax"}
    for tier in ("turbo", "standard"):
        assert fig["first_window_back_s"][tier] is not None
        assert 0.0 <= fig["slow_share_steady"][tier] <= 1.0 and 0.0 <= fig["slow_share_after_back"][tier] <= 1.0
        assert f"{tier}_back_within_10s_at_steady_rate" in fig["pass"] and f"{tier}_within_10s" in fig["pass"]
        assert f"{tier}_within_10s_beyond_steady" in fig["pass"] and tier in fig["recovery_beyond_steady_s"]


def test_the_real_runs_schedule_holds_its_seeded_turbo_clump(soak: ModuleType) -> None:
    """``real_schedule`` draws what ``burst`` sends: seed 1's mixed load after the burst holds ten
    or more Turbo arrivals within 0.9 s some 46-50 s after the burst's end (the real runs' late
    slow stretch, traced there by Server-Timing), against about 2.5 Turbo arrivals a second."""
    from turbo_isolation import capacity_rps

    cap = capacity_rps()
    plan, started, ended = soak.real_schedule(1, 0.5 * cap, 10 * cap, 15.0, 30.0, 60.0)
    assert plan == soak.real_schedule(1, 0.5 * cap, 10 * cap, 15.0, 30.0, 60.0)[0]
    assert 15.0 <= started < ended and ended - started >= 30.0
    assert all(started <= t <= ended for t, _, bursting in plan if bursting)
    turbo = [t - ended for t, tier, bursting in plan if tier == "turbo" and t > ended and not bursting]
    clumps = [(t, sum(1 for u in turbo if t <= u < t + 0.9)) for t in turbo]
    at, most = max(clumps, key=lambda c: c[1])
    assert most >= 10 and 46.0 <= at <= 50.0, (at, most)
    assert len(turbo) / 60.0 < 3.5
