"""``turbogate plan size`` end to end: its fleet meets the SLOs in ``turbogate sim``; one replica fewer does not.

The recommended fleet is rerun through the simulator's own command line (a fleet file, a gateway
config, a run folder read back), and each tier's p95 is recomputed here from the records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from turbogate.cli import app
from turbogate.plan.size_sim import API_KEY, default_gateway_data
from turbogate.results import load_run

MODEL = "llama-3.1-8b"
SLO = {"turbo": 0.5, "standard": 3.0}
UNSERVED = 1e9  # seconds: slower than any answer, finite so a percentile between two of them is not NaN


def _p95(ttfts: list[float | None]) -> float:
    """p95 TTFT with an unserved request slower than every answer."""
    return float(np.percentile([UNSERVED if t is None else t for t in ttfts], 95))


def _simulate(tmp: Path, name: str, fleet: dict[str, Any], inputs: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Run ``fleet`` at the peak through ``turbogate sim``; per tier, p95 TTFT over the window and its second half."""
    gw, fl, out = tmp / f"{name}-gateway.yaml", tmp / f"{name}-fleet.yaml", tmp / name
    gw.write_text(yaml.safe_dump(default_gateway_data(MODEL)))
    fl.write_text(yaml.safe_dump(fleet))
    share = inputs["turbo_share"]
    r = CliRunner().invoke(app, [
        "sim", "--config", str(gw), "--fleet", str(fl), "--qps", str(inputs["peak_rps"]),
        "--duration", str(inputs["window_s"]), "--warmup", str(inputs["warmup_s"]),
        "--prompt-tokens", str(inputs["prompt_tokens"]), "--output-tokens", str(inputs["output_tokens"]),
        "--tiers", f"turbo={share:g},standard={1 - share:g}", "--api-key", API_KEY,
        "--random-seed", str(inputs["seed"]), "--no-report", "--no-progress", "--out", str(out)])
    assert r.exit_code == 0, r.output
    records = load_run(out).requests
    half = inputs["window_s"] / 2
    out_p95 = {}
    for tier in SLO:
        mine = [(x.scheduled_s, x.ttft_s if x.ok else None) for x in records if x.tier_asked == tier]
        assert len(mine) > 100, tier
        out_p95[tier] = (_p95([t for _, t in mine]), _p95([t for s, t in mine if s >= half]))
    return out_p95


@pytest.mark.parametrize(("gpu", "peak", "jobs"), [("L4", 8.0, "1"), ("A10G", 12.0, "2")])  # in process; a pool
def test_the_recommended_fleet_meets_the_slos_in_sim_and_one_replica_fewer_misses(
        tmp_path: Path, gpu: str, peak: float, jobs: str) -> None:
    r = CliRunner().invoke(app, [
        "plan", "size", "--model", MODEL, "--gpus", gpu, "--tp", "1", "--peak-rps", str(peak),
        "--prompt-tokens", "256", "--output-tokens", "128", "--turbo-share", "0.2",
        "--turbo-ttft-p95", str(SLO["turbo"]), "--standard-ttft-p95", str(SLO["standard"]), "--top", "1",
        "--json", "--no-progress", "--jobs", jobs])
    assert r.exit_code == 0, r.output
    answer = json.loads(r.output)
    (fleet,) = answer["fleets"]
    assert fleet["gpu"] == gpu and fleet["tp"] == 1 and fleet["replicas"] >= 2
    assert fleet["cost_per_hour"] == pytest.approx(fleet["replicas"] * fleet["price_per_gpu_hour"])
    inputs = answer["inputs"]

    met = _simulate(tmp_path, "recommended", fleet["fleet_file"], inputs)
    for tier, (whole, second_half) in met.items():
        assert whole <= SLO[tier] and second_half <= SLO[tier], (tier, met)
        assert fleet["simulated"]["ttft_p95_s"][tier] == pytest.approx(whole)  # the table's figure is this run's

    smaller = json.loads(json.dumps(fleet["fleet_file"]))
    smaller["pools"][0]["replicas"][0]["count"] -= 1
    missed = _simulate(tmp_path, "one-fewer", smaller, inputs)
    assert any(max(p) > SLO[tier] for tier, p in missed.items()), missed
