"""Phase-aware replica choice in the simulator: the replicas' scrapes carry the DCGM gauges the
emulator exports (the same step model, engine/busy.py), so the flow runs sched/phase.py
unchanged; ``--compare-policies`` shows it beside the others."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tests.sim.helpers import KEY, gateway_data, sim_config
from turbogate.cli import app
from turbogate.engine import Request
from turbogate.engine.busy import BusyFractions
from turbogate.sim.baselines import DEFAULT_PHASE_WEIGHT, PHASE_AWARE
from turbogate.sim.build import build_replicas, build_simulation

MIXED = {"prompt_tokens": "1500:2500:16:6000", "output_tokens": "200:300:8:600"}


def test_scrapes_carry_the_gauges_and_the_policy_turns_the_rule_on() -> None:
    for policy, weight in (("turbogate", 0.0), (PHASE_AWARE, DEFAULT_PHASE_WEIGHT)):
        sim, _ = build_simulation(sim_config(policy=policy, qps=0.5, duration=30.0, **MIXED))
        assert sim.flow.picker.config.phase_weight == weight
        records = sim.run()
        assert any(r.ok for r in records)
        loads = [r.load for r in sim.flow.picker.replicas()]
        assert all(load is not None and load.tensor_active is not None and load.dram_active is not None
                   for load in loads)
        assert all(0.0 <= x <= 1.0 for load in loads if load is not None
                   for x in (load.tensor_active, load.dram_active))


def test_the_gauges_see_each_phase() -> None:
    """A simulated replica's DCGM readings: long prompts alone keep its tensor pipes busier than its
    HBM, long answers alone the reverse (what the rule relies on)."""
    shares: dict[str, BusyFractions] = {}
    for name, prompt, output in (("prefill", 6000, 2), ("decode", 32, 600)):
        reps, _ = build_replicas(sim_config())
        rep = reps[0]
        for i in range(8):
            rep.loop.submit(Request(f"{name}-{i}", prompt_tokens=prompt, output_tokens=output), 0.0)
        now = 0.0
        while (end := rep.loop.next_time()) is not None:
            rep.loop.advance(end)
            now = end
        shares[name] = rep.busy_fractions(now)  # the first reading: since the engine started
    prefill, decode = shares["prefill"], shares["decode"]
    assert prefill.tensor_active > 2 * prefill.dram_active
    assert decode.dram_active > 2 * decode.tensor_active
    assert all(0.0 < x <= 1.0 for f in (prefill, decode) for x in f)


def test_compare_policies_lists_phase_aware_with_every_tier(tmp_path: Path) -> None:
    gw, fl = tmp_path / "gateway.yaml", tmp_path / "fleet.yaml"
    gw.write_text(yaml.safe_dump(gateway_data()))
    fl.write_text(yaml.safe_dump({"pools": [{"name": "p", "replicas": [
        {"count": 2, "gpu": "L4", "model": "llama-3.1-8b", "max_num_seqs": 8}]}]}))
    out = tmp_path / "policies"
    r = CliRunner().invoke(app, ["sim", "--config", str(gw), "--fleet", str(fl), "--qps", "1", "--duration", "20",
                                 "--prompt-tokens", MIXED["prompt_tokens"], "--output-tokens", MIXED["output_tokens"],
                                 "--tiers", "turbo=0.2,standard=0.6,relax=0.2", "--api-key", KEY, "--no-progress",
                                 "--no-report", "--compare-policies", "--jobs", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = {row["policy"]: row for row in json.loads((out / "baselines.json").read_text())}
    assert {"turbogate", "least-outstanding", PHASE_AWARE} <= set(rows)
    phase = rows[PHASE_AWARE]
    for field in ("goodput_rps", "turbo_p95_ttft_s", "standard_p95_ttft_s", "relax_p95_ttft_s", "p95_tpot_s"):
        assert phase[field] is not None, field
    table = (out / "baselines.md").read_text()
    assert "| phase-aware |" in table and "Relax p95 TTFT" in table and "p95 TPOT" in table
    assert "phase-aware" in r.output  # the printed table
