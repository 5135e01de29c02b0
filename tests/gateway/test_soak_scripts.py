"""The soak scripts stay runnable: each at a small size prints its one JSON object, and the
invariants that do not depend on timing hold (every shed carries Retry-After, memory bounded,
normal traffic unharmed).  Their speed figures are read from full runs by hand (docs/security.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(script: str, *args: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, str(BENCH / script), *args], check=True, capture_output=True,
                         text=True, timeout=240)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    result: dict[str, object] = json.loads(lines[0])
    return result


def test_overload_soak_small() -> None:
    out = _run("overload_soak.py", "--seconds", "5", "--baseline-seconds", "3", "--burst-seconds", "3",
               "--after-seconds", "6")
    assert out["shed"] and out["shed_without_retry_after"] == 0
    passed = out["pass"]
    assert isinstance(passed, dict) and passed["memory_bounded"]
    assert "recovery_s" in out and "turbo_p95_ttft_ratio" in out  # figures for the full run, not asserted here
    burst = out["burst"]
    assert isinstance(burst, dict) and set(burst["recovery_s"]) == {"turbo", "standard", "relax"}


def test_slow_clients_small() -> None:
    out = _run("slow_clients.py", "--seconds", "4", "--slowloris", "100", "--rps", "10")
    assert out["slowloris_open_mean"] and out["normal_beside_slowloris"]["errors"] == {}  # type: ignore[index]
    passed = out["pass"]
    assert isinstance(passed, dict) and passed["memory_bounded"]
