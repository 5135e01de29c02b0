#!/usr/bin/env python3
"""Do plan, sim and bench agree on the knee?  Prints ONE JSON object.

One definition of the knee for all three: what the fleet completes while saturated, requests/s (the
throughput method of results/knee.py, its default; ``plan_knee``'s closed form of the same quantity is
``turbogate.plan.knee.plateau_knee``).  For each fleet:

- ``plan``: the closed form: the ⌊capacity_share × slots⌋ sequences the gateway lets the Standard tier hold,
  spread over the engines, each engine's batch running in cohorts (plan/knee.py), summed over the replicas;
- ``sim``: the gateway's own core in virtual time over held steps around the plan's knee;
- ``bench``: the real gateway and emulators on this machine at held steps around sim's knee.  The
  emulators run at a time scale that puts the fleet's knee near ``--target-rps`` of wall clock (a few
  req/s: this machine's bench, gateway and emulators stay far from its limits), and the measured knee is
  scaled back to model time.  ``machine_bound`` is the bench's own machine verdict (bench/machine.py): a
  run this machine bounded is reported but not compared.

Fleets: three GPU types, two models, two workloads, every request Standard (a Turbo share adds the
holdback's dynamic headroom, which the closed form does not model: docs/bench.md says which to trust).
``largest_difference`` is max/min − 1 over a fleet's three knees, then the largest over the fleets.

Usage: ``python benchmarks/three_way.py [--hold 8] [--target-rps 6] [--fleets a100-8b,h100-8b,l4-1b]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from turbogate.bench.arrivals import Arrivals
from turbogate.bench.options import LoadOptions
from turbogate.bench.run import BenchConfig, run_bench
from turbogate.bench.runner import Target
from turbogate.bench.workload import TierMix, TruncNormal, Workload
from turbogate.config import TierConfig, parse_config
from turbogate.demo import DEMO_KEY, gateway_config
from turbogate.plan.knee import PlannedPool, plateau_knee
from turbogate.procs import Service, start_emulator, start_service, wait_healthy
from turbogate.results import SLO, CostConfig, KneeSettings, Summary
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate, summarize_sim

CHAT_FRAMING = 10  # tokens the emulator (and sim) add to a one-message chat prompt
SIM_MULTIPLES = (0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.8, 2.2)  # of the plan's knee
BENCH_MULTIPLES = (0.5, 0.8, 1.3, 1.8, 2.4)  # of sim's knee
SIM_HOLD_S = 30.0
TARGET_CHUNKS_PER_S = 800.0  # streamed chunks per wall second the machine is asked to carry, at most


@dataclass(frozen=True, slots=True)
class Fleet:
    name: str
    gpu: str
    model: str
    max_num_seqs: int
    replicas: int
    prompt_tokens: int
    output_tokens: int

    def pool(self) -> PlannedPool:
        return PlannedPool(gpu=self.gpu, model=self.model, replicas=self.replicas,
                           prompt_tokens=self.prompt_tokens + CHAT_FRAMING, output_tokens=self.output_tokens,
                           max_num_seqs=self.max_num_seqs)

    def workload(self) -> Workload:
        return Workload(prompt_tokens=TruncNormal.fixed(self.prompt_tokens),
                        output_tokens=TruncNormal.fixed(self.output_tokens), tiers=TierMix.parse("standard=1"),
                        n_api_keys=1)


FLEETS = {f.name: f for f in (
    Fleet("a100-8b", "A100-80G-SXM", "llama-3.1-8b", 8, 2, 256, 128),
    Fleet("h100-8b", "H100-SXM", "llama-3.1-8b", 16, 1, 512, 64),
    Fleet("l4-1b", "L4", "llama-3.2-1b", 16, 2, 512, 64),
)}


def standard_share() -> float:
    """The share of a pool's slots the Standard tier may hold (the gateway config's default)."""
    tier: TierConfig = parse_config(gateway_config(["http://127.0.0.1:9"])).tiers["standard"]
    return tier.capacity_share


def sim_knee(f: Fleet, plan: float, seed: int) -> tuple[float | None, str]:
    rates = tuple(plan * m for m in SIM_MULTIPLES)
    load = LoadOptions(shape="steps", qps=rates[0], qps_start=rates[0], qps_end=rates[-1], steps=len(rates),
                       duration_s=SIM_HOLD_S * len(rates), arrivals=Arrivals("poisson"), workload=f.workload(),
                       random_seed=seed, slo=SLO(), knee=KneeSettings(), cost=CostConfig(), rates=rates)
    fleet = {"pools": [{"name": "demo", "replicas": [{"count": f.replicas, "gpu": f.gpu, "model": f.model,
                                                      "max_num_seqs": f.max_num_seqs}]}]}
    urls = [f"http://127.0.0.1:{9 + i}" for i in range(f.replicas)]
    sc = SimConfig(gateway=parse_config(gateway_config(urls, f.model, f.max_num_seqs)),
                   fleet=parse_fleet(fleet, f.name), load=load, api_keys=(DEMO_KEY,))
    s = summarize_sim(sc, simulate(sc))
    k = s.knees["all"]
    return k.value, f"{k.verdict}, {k.confidence} confidence"


def bench_knee(f: Fleet, knee_model: float, time_scale: float, hold: float, seed: int,
               out: Path) -> tuple[Summary, float]:
    """The fleet benched at held steps around ``knee_model`` (model req/s); returns the summary and the wall time."""
    wall = time.perf_counter()
    logs = out / "logs"
    services: list[Service] = []
    try:
        for _ in range(f.replicas):
            services.append(start_emulator("--gpu", f.gpu, "--model", f.model, "--max-num-seqs", str(f.max_num_seqs),
                                           "--time-scale", f"{time_scale:.6g}", log_dir=logs, wait=False))
        cfg_path = out / "gateway.yaml"
        cfg_path.write_text(yaml.safe_dump(gateway_config([s.url for s in services], f.model, f.max_num_seqs)))
        gw = start_service("gateway", ["serve", "--config", str(cfg_path)], log_dir=logs, wait=False)
        services.append(gw)
        for svc in services:
            wait_healthy(svc.url, svc.process, timeout=60.0)
        knee_wall = knee_model / time_scale
        rates = tuple(m * knee_wall for m in BENCH_MULTIPLES)
        cfg = BenchConfig(
            target=Target(base_url=gw.url, route="/v1/chat/completions", model=f.model, api_keys=(DEMO_KEY,),
                          timeout_s=120.0),
            shape="steps", rates=rates, qps_start=rates[0], qps_end=rates[-1], steps=len(rates),
            duration_s=hold * len(rates), arrivals=Arrivals("poisson"), workload=f.workload(), random_seed=seed,
            knee=KneeSettings(), out=out, grace_s=5.0, drain_s=10.0, live=False, report=False,
            label=f"three_way {f.name}", max_lag_s=0.05)
        summary = asyncio.run(run_bench(cfg, echo=lambda _msg: None)).summary
    finally:
        for svc in reversed(services):
            with contextlib.suppress(Exception):
                svc.stop()
    return summary, time.perf_counter() - wall


def spread(values: list[float]) -> float | None:
    return max(values) / min(values) - 1 if len(values) >= 2 and min(values) > 0 else None


def run_fleet(f: Fleet, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    plan = plateau_knee(f.pool(), standard_share())
    simulated, sim_verdict = sim_knee(f, plan, args.seed)
    row: dict[str, Any] = {"fleet": f.name, "gpu": f.gpu, "model": f.model, "max_num_seqs": f.max_num_seqs,
                           "replicas": f.replicas, "prompt_tokens": f.prompt_tokens, "output_tokens": f.output_tokens,
                           "plan_knee_rps": plan, "sim_knee_rps": simulated, "sim_verdict": sim_verdict}
    reference = simulated or plan
    target = min(args.target_rps, TARGET_CHUNKS_PER_S / f.output_tokens)
    time_scale = reference / target
    summary, wall = bench_knee(f, reference, time_scale, args.hold, args.seed, work / f.name)
    k = summary.knees["all"]
    machine = summary.config.get("machine", {})
    benched = None if k.value is None else k.value * time_scale
    row |= {"time_scale": time_scale, "bench_knee_wall_rps": k.value, "bench_knee_rps": benched,
            "bench_verdict": f"{k.verdict}, {k.confidence} confidence" if k.value is not None else k.note,
            "machine_bound": bool(machine.get("saturated_first")), "machine": machine.get("line"),
            "bench_wall_s": round(wall, 1)}
    knees = {"plan": plan, "sim": simulated, "bench": None if row["machine_bound"] else benched}
    got = [v for v in knees.values() if v is not None]
    row["largest_difference"] = spread(got)
    row["pairwise"] = {f"{a}-{b}": spread([knees[a], knees[b]])  # type: ignore[list-item]
                       for a, b in (("plan", "sim"), ("sim", "bench"), ("plan", "bench"))
                       if knees[a] is not None and knees[b] is not None}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleets", default=",".join(FLEETS), help="comma-separated: " + ", ".join(FLEETS))
    ap.add_argument("--hold", type=float, default=8.0, help="seconds per bench step (five steps per fleet)")
    ap.add_argument("--target-rps", type=float, default=6.0, help="the fleet's knee in wall-clock req/s, at most")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    names = [n.strip() for n in args.fleets.split(",") if n.strip()]
    unknown = [n for n in names if n not in FLEETS]
    if unknown:
        ap.error(f"--fleets: unknown {', '.join(unknown)}; choose from {', '.join(FLEETS)}")
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="three-way-") as tmp:
        for name in names:
            print(f"three_way: {name} …", file=sys.stderr, flush=True)
            rows.append(run_fleet(FLEETS[name], args, Path(tmp)))
    diffs = [r["largest_difference"] for r in rows if r["largest_difference"] is not None]
    print(json.dumps({
        "knee_definition": "what the fleet completes while saturated, req/s (results/knee.py throughput method; "
                           "plan: turbogate.plan.knee.plateau_knee)",
        "fleets": rows,
        "largest_difference": max(diffs) if diffs else None,
        "target_difference": 0.10,
        "machine_bound_fleets": [r["fleet"] for r in rows if r["machine_bound"]],
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }, indent=2))


if __name__ == "__main__":
    main()
