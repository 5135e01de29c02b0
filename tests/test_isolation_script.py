"""``benchmarks/turbo_isolation.py --simulate --wall-time`` keeps the gateway's times at their
real-run meaning: engines five times faster, not the gateway's clock five times slower.  At 2× the
Standard requests served wait up to their 5-s queue budget (seconds, as in the real run), where
the engine-time simulation cuts them at a fifth of it.  Virtual time only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(*args: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, str(BENCH / "turbo_isolation.py"), "--simulate", "1", *args],
                         check=True, capture_output=True, text=True, timeout=240)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    result: dict[str, object] = json.loads(lines[0])
    return result


def test_wall_time_simulation_keeps_the_queue_budget_in_wall_seconds() -> None:
    wall = _run("--wall-time")
    assert wall["clock"] == "wall" and isinstance(wall["turbo_p95_ttft_ratio"], float)
    tiers = wall["tiers_at_2x"]
    assert isinstance(tiers, dict) and set(tiers) == {"turbo", "standard", "relax"}
    standard = tiers["standard"]
    assert 1.5 < standard["ttft_p95_s"] <= 5.5, standard  # waits of seconds, within the 5-s budget
    assert tiers["relax"]["answered"] == tiers["relax"]["requests"]  # its 60-s budget outlasts the run
