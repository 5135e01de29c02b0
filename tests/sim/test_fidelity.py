"""sim predicts bench: a short ramp across the knee, measured (gateway + 2 emulators, real time)
and simulated with the same config, fleet and seed (benchmarks/sim_fidelity.py, smaller)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sim_fidelity.py"


@pytest.mark.slow
def test_sim_predicts_a_measured_ramp_within_a_loose_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # the script imports its sibling benchmarks/common.py
    spec = importlib.util.spec_from_file_location("sim_fidelity", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # 30 s of ramp in 3 steps: below, around and above the knee.  The bound is loose (a busy CI
    # machine delays the real processes); the benchmark's target is 15 %.
    out = mod.fidelity(duration=30.0, steps=3, work=tmp_path)
    steps = out["steps"]
    assert len(steps) == 3
    for row in steps:
        assert row["rel_err"]["throughput"] is not None and row["rel_err"]["throughput"] <= 0.35, row
    assert steps[0]["rel_err"]["ttft_p50"] <= 0.35, steps[0]  # unloaded: TTFT is a prefill step plus the wire
    # Loaded, queueing sets the tail.  Unloaded, p95 is one or two of ~25 requests, and whether a
    # scrape caught a request between engine steps (docs/sim.md, Fidelity) makes the measured
    # one vary from run to run (0.13–0.30 s seen), so it is not bounded here.
    for row in steps[1:]:
        assert row["rel_err"]["ttft_p95"] is not None and row["rel_err"]["ttft_p95"] <= 0.5, row
