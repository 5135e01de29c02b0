"""Phase-aware replica choice (sched/phase.py) against the current picker and least-outstanding,
in the simulator, on a mixed long-prompt / long-output workload, over a family of fleets, seeds
and loads.  Prints ONE JSON object.

    python benchmarks/phase_aware.py [--seeds 1,2,3] [--loads 0.5,0.8,1.2] [--weights 0.25,1,4] [--duration 120]

The workload: prompts of N(1500, 2500) tokens within 16..8000 and answers of N(300, 500) within
8..1500, drawn independently, so long prompts with short answers and short prompts with long
answers come mixed; 20 % Turbo, 60 % Standard, 20 % Relax; SLO TTFT ≤ 2 s and TPOT ≤ 100 ms.
Each fleet's load is a multiple of its modelled capacity (``perf.capacity.saturation`` at the
workload's mean shape, times the replicas), after 20 s of warm-up at that rate.  The gateway
config is examples/gateway.yaml (the default settings), with its pool's replicas replaced by the
fleet's.

Per case and policy: goodput (req/s within the SLO), each tier's p95 TTFT and shed rate, p95
TPOT.  ``verdict`` per weight: how often phase-aware's goodput beats the current picker's, the
worst ratio of any tier's p95 TTFT to the current picker's, and per fleet and load the medians
over the seeds (docs/gateway.md, "Phase-aware choice", has the figures).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from turbogate.bench.options import build_load
from turbogate.config import load_config
from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.perf.capacity import saturation
from turbogate.results import ALL, summarize
from turbogate.sim import baselines
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate

ROOT = Path(__file__).resolve().parent.parent
MODEL = "llama-3.1-8b"
PROMPT, OUTPUT = "1500:2500:16:8000", "300:500:8:1500"
TIERS = ("turbo", "standard", "relax")
#: (name, GPU, replicas, max_num_seqs): three GPU generations, three batch limits.
FLEETS = (("4xH100", "H100-SXM", 4, 256), ("3xA100", "A100-80G-SXM", 3, 128), ("4xL4", "L4", 4, 16))


def capacity_rps(gpu: str, replicas: int, seqs: int) -> float:
    dep = deployment(get_gpu(gpu), resolve_model(MODEL))
    mean_prompt = build_load(**_load_args(1.0, 1, 10.0)).workload.prompt_tokens.expected_mean()
    mean_output = build_load(**_load_args(1.0, 1, 10.0)).workload.output_tokens.expected_mean()
    return replicas * saturation(dep, round(mean_prompt), round(mean_output), max_num_seqs=seqs).request_rate


def _load_args(qps: float, seed: int, duration: float) -> dict[str, Any]:
    return dict(shape=None, qps=qps, qps_start=None, qps_end=None, steps=1, duration=duration, arrivals="poisson",
                burstiness=1.0, prompt_tokens=PROMPT, output_tokens=OUTPUT, dataset=None, no_seed=False,
                tiers="turbo=0.2,standard=0.6,relax=0.2", n_api_keys=1, random_seed=seed, slo="ttft=2,tpot=0.1",
                knee_method="throughput", knee_k=2.0, knee_metric="e2e", fleet_cost=1.0, tier_cost=None)


def run_case(policy: str, gpu: str, replicas: int, seqs: int, qps: float, seed: int,
             duration: float) -> dict[str, Any]:
    gateway = load_config(ROOT / "examples" / "gateway.yaml")
    pool = gateway.pools[0]
    fleet = parse_fleet({"pools": [{"name": pool.name, "replicas": [
        {"count": replicas, "gpu": gpu, "model": MODEL, "max_num_seqs": seqs}]}]})
    load = build_load(**_load_args(qps, seed, duration))
    sc = SimConfig(gateway=gateway, fleet=fleet, load=load, model=MODEL, policy=policy,
                   api_keys=("sk-acme-example",), warmup_s=20.0)
    out = simulate(sc)
    summary = summarize(out.records, out.steps, kind="sim", started_at="", duration_s=out.duration_s, config={},
                        slo=load.slo, knee_settings=load.knee, cost=load.cost)
    tiers = summary.steps[0].tiers
    row: dict[str, Any] = {"goodput_rps": round(tiers[ALL].goodput_rps, 3),
                           "p95_tpot_ms": _ms(tiers[ALL].pct("tpot", "p95"))}
    for t in TIERS:
        st = tiers.get(t)
        row[f"{t}_p95_ttft_ms"] = None if st is None else _ms(st.pct("ttft", "p95"))
        row[f"{t}_shed"] = None if st is None else round(st.shed_rate, 4)
    return row


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--loads", default="0.5,0.8,1.2", help="multiples of each fleet's modelled capacity")
    ap.add_argument("--weights", default="0.25,1,4", help="phase_weight values to try")
    ap.add_argument("--duration", type=float, default=120.0, help="measured seconds per run (virtual)")
    ap.add_argument("--fleets", default=",".join(f[0] for f in FLEETS))
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    loads = [float(x) for x in args.loads.split(",")]
    weights = [float(w) for w in args.weights.split(",")]
    fleets = [f for f in FLEETS if f[0] in args.fleets.split(",")]
    cases: list[dict[str, Any]] = []
    for name, gpu, n, seqs in fleets:
        cap = capacity_rps(gpu, n, seqs)
        for load in loads:
            for seed in seeds:
                qps = round(cap * load, 2)
                case: dict[str, Any] = {"fleet": name, "load": load, "qps": qps, "seed": seed}
                for policy in ("turbogate", "least-outstanding"):
                    case[policy] = run_case(policy, gpu, n, seqs, qps, seed, args.duration)
                for w in weights:
                    baselines.DEFAULT_PHASE_WEIGHT = w  # the config leaves phase_weight at 0
                    case[f"phase-aware@{w:g}"] = run_case(baselines.PHASE_AWARE, gpu, n, seqs, qps, seed,
                                                          args.duration)
                cases.append(case)
                print(f"{name} load {load} seed {seed}: done", file=sys.stderr, flush=True)
    print(json.dumps({"workload": {"prompt_tokens": PROMPT, "output_tokens": OUTPUT, "slo": "ttft=2,tpot=0.1"},
                      "cases": cases, "verdict": {f"phase-aware@{w:g}": verdict(cases, f"phase-aware@{w:g}")
                                                  for w in weights}}, indent=1))


def verdict(cases: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Against the current picker (``turbogate``) over every case."""
    gains = [c[key]["goodput_rps"] / c["turbogate"]["goodput_rps"] for c in cases if c["turbogate"]["goodput_rps"]]
    worst: dict[str, float] = {}
    for t in TIERS:
        ratios = [c[key][f"{t}_p95_ttft_ms"] / c["turbogate"][f"{t}_p95_ttft_ms"] for c in cases
                  if c[key][f"{t}_p95_ttft_ms"] and c["turbogate"][f"{t}_p95_ttft_ms"]]
        if ratios:
            worst[t] = round(max(ratios), 3)
    by: dict[str, dict[str, float]] = {}
    for fleet in dict.fromkeys(c["fleet"] for c in cases):
        for load in dict.fromkeys(c["load"] for c in cases):
            mine = [c for c in cases if c["fleet"] == fleet and c["load"] == load and c["turbogate"]["goodput_rps"]]
            if mine:
                row = {"goodput_ratio_median": _median([c[key]["goodput_rps"] / c["turbogate"]["goodput_rps"]
                                                        for c in mine])}
                for t in TIERS:
                    ms = f"{t}_p95_ttft_ms"
                    row[f"{t}_p95_ttft_ratio_median"] = _median([c[key][ms] / c["turbogate"][ms] for c in mine
                                                                 if c[key][ms] and c["turbogate"][ms]])
                by[f"{fleet}@{load:g}"] = row
    return {"goodput_ratio_min": round(min(gains), 3), "goodput_ratio_median": round(statistics.median(gains), 3),
            "goodput_wins": sum(g > 1.0 for g in gains), "goodput_losses": sum(g < 1.0 for g in gains),
            "cases": len(gains), "worst_p95_ttft_ratio": worst, "by_fleet_and_load": by}


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3) if xs else float("nan")


if __name__ == "__main__":
    main()
