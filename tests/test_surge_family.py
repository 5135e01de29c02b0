"""``benchmarks/surge_family.py``: fleets drawn from a fixed generator (the same family on every
run, so nothing is tuned to a fleet chosen after looking), each judged in the simulator with its
Turbo-alone floor beside it, and a slow fleet's run made long enough that its unloaded reference
is a p95, not a maximum of a handful.  Virtual time only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

from surge_family import MIN_REFERENCE, REFERENCE_SENT, draw_fleets, hold_for, summary  # noqa: E402


def test_the_family_is_fixed_by_its_seed() -> None:
    assert draw_fleets(6, 2026) == draw_fleets(6, 2026)
    assert draw_fleets(6, 2026) != draw_fleets(6, 7)
    for fleet in draw_fleets(24, 2026):
        assert 0.2 <= fleet.turbo_share <= 0.3


def test_a_slow_fleet_gets_a_longer_run() -> None:
    fast, slow = draw_fleets(3, 2026)[0], draw_fleets(3, 2026)[2]
    assert hold_for(fast, 25.0) == 25.0
    share = slow.turbo_share
    hold = hold_for(slow, 25.0)
    assert hold > 25.0 and 0.2 * slow.capacity_rps() * share * hold >= min(REFERENCE_SENT, 0.2 * slow.capacity_rps()
                                                                          * share * 240.0) - 1e-9


def test_summary_counts_each_class_apart() -> None:
    def row(kind: str, mixed: list[float | None], goodput: list[float], cold: list[float | None]) -> dict[str, Any]:
        return {"class": kind, "mixed": mixed, "standard_goodput_rps": goodput, "cold_ratio": cold,
                "standard_asked_goodput_rps": [0.5 * g for g in goodput],
                "served_rps": [2.0 * g or 1.0 for g in goodput], "turbo_served_turbo": [0.5, None]}

    rows = [row("scheduling", [1.2, 2.0], [4.0, 9.0], [1.1, 0.9]), row("engine", [3.0, None], [2.0, 0.0], [None, 1.3]),
            row("thin", [1.1, 9.0], [1.0, 1.0], [1.0, 1.0])]
    out = summary(rows)
    assert out["scheduling"] == {"fleets": 1, "runs": 2, "within_target": 1, "geomean_worst_window": 1.549,
                                 "geomean_standard_goodput_rps": 6.0, "geomean_standard_asked_goodput_rps": 3.0,
                                 "runs_without_standard_goodput": 0,
                                 "geomean_served_rps": 12.0, "mean_turbo_served_turbo": 0.5, "max_cold_ratio": 1.1}
    assert out["all"]["fleets"] == 3 and out["all"]["runs"] == 6 and out["all"]["within_target"] == 2
    assert out["all"]["max_cold_ratio"] == 1.3
    assert out["engine"]["geomean_standard_goodput_rps"] == 2.0 and out["engine"]["runs_without_standard_goodput"] == 1
    assert out["engine"]["max_cold_ratio"] == 1.3
    assert out["engine"]["runs"] == 2 and out["engine"]["within_target"] == 0
    assert out["thin"]["within_target"] == 1


def test_a_run_prints_one_json_object_per_family() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "surge_family.py"), "--fleets", "3", "--seeds", "1"],
                         check=True, capture_output=True, text=True, timeout=240)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    result = json.loads(lines[0])
    rows = result["fleets"]
    assert [r["fleet"] for r in rows] == ["f0", "f1", "f2"]
    for r in rows:
        assert len(r["mixed"]) == 1 and len(r["alone"]) == 1 and r["class"] in ("scheduling", "engine", "thin")
        assert len(r["standard_goodput_rps"]) == 1 and r["standard_goodput_rps"][0] > 0 and r["cold_ratio"][0] > 0
        # Those that asked for Standard are among those served it (with Turbo's excess).
        assert 0 < r["standard_asked_goodput_rps"][0] <= r["standard_goodput_rps"][0]
    # f2 (two slow L4 replicas, 32 sequences at 1.5 s a second) would send about 5 Turbo requests
    # in 25 s at 0.2x: its run is made longer, so its reference is a p95 of enough answers.
    assert rows[0]["hold_s"] == 25.0 and rows[2]["hold_s"] > 25.0
    assert result["min_reference"] == MIN_REFERENCE
    assert sum(v["runs"] for k, v in result["summary"].items() if k != "all") == 3 == result["summary"]["all"]["runs"]
