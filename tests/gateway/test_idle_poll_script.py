"""benchmarks/idle_poll.py stays runnable, and what it shows holds at a small size: in front of an
engine at real speed (answers after milliseconds) the event loop's adaptive poll polls next to
nothing, a gateway with the poll off polls nothing at all, and in front of the fast
stub the poll runs.  The figures themselves are read from full runs (docs/gateway.md, twelfth pass)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "idle_poll.py"


def test_the_poll_stays_shut_in_front_of_a_slow_engine_and_runs_in_front_of_a_fast_one() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--seconds", "0.5"], check=True, capture_output=True,
                         text=True, timeout=300)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    result = json.loads(lines[0])
    runs = result["runs"]
    assert set(runs) == {"fast_engine_1_connection", "slow_engine_1_connection", "slow_engine_16_connections",
                         "slow_engine_16_streams"}
    for case, by_setting in runs.items():
        for setting, rounds in by_setting.items():
            (run,) = rounds
            assert run["errors"] == 0 and run["requests"] > 0, (case, setting, run)
            if setting == "off":
                assert run["poll_share"] == 0 and run["window_us_at_end"] == 0, (case, run)
            elif case.startswith("slow"):
                # Idle periods past the cap keep the window shut; a burst of answers ending one engine
                # step together may open it for a moment, never past its cap (200 µs).
                assert run["window_us_at_end"] <= 200, (case, run)
                assert run["poll_share"] < 0.02, (case, run)  # what the poll costs there: next to nothing
    assert runs["fast_engine_1_connection"]["adaptive"][0]["poll_share"] > 0
    assert set(result["slow_engine_cpu_us_per_request"]) == {"slow_engine_1_connection", "slow_engine_16_connections",
                                                             "slow_engine_16_streams"}
