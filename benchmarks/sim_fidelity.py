"""Does ``turbogate sim`` predict what ``turbogate bench`` measures?  One workload both ways.

Measured: two emulators (L4, Llama-3.1-8B, max 8 seqs, ``--time-scale 1``) behind a real
gateway (``turbogate.procs``), driven by bench on a linear ramp from ~0.3× to ~1.6× the fleet's
perf-model capacity (so it crosses the knee).  Predicted: sim with the same gateway config, a
fleet file describing those emulators, and the same load options and seed.  Per step: the
relative error of p50 and p95 TTFT and of achieved throughput (all tiers), sim against bench.

    python benchmarks/sim_fidelity.py [--duration 240] [--steps 6] [--out runs/fidelity]

prints one JSON object; ``max_rel_err`` and ``within_15pct`` summarize it (target: all ≤ 0.15).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import common  # what the benchmarks share (benchmarks/common.py)
from turbogate.bench.options import LoadOptions, build_load
from turbogate.bench.run import BenchConfig, run_bench
from turbogate.bench.runner import Target
from turbogate.config import load_config
from turbogate.perf import deployment, get_gpu, get_model, saturation
from turbogate.results import ALL, Summary
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate, summarize_sim

KEY = "sk-fidelity"
GPU, MODEL, SEQS, PROMPT, OUTPUT, REPLICAS = "L4", "llama-3.1-8b", 8, 128, 48, 2
SCRAPE_S = 0.5


def capacity() -> float:
    """Fleet req/s per the perf model (chat framing adds 10 prompt tokens)."""
    dep = deployment(get_gpu(GPU), get_model(MODEL))
    return REPLICAS * saturation(dep, PROMPT + 10, OUTPUT, max_num_seqs=SEQS).request_rate


def gateway_yaml(urls: list[str]) -> str:
    return common.fidelity_gateway_yaml("fid", KEY, MODEL, urls, SEQS, SCRAPE_S)


def load_options(duration: float, steps: int, lo: float, hi: float, seed: int) -> LoadOptions:
    cap = capacity()
    return build_load(shape="linear", qps=None, qps_start=lo * cap, qps_end=hi * cap, steps=steps,
                      duration=duration, arrivals="poisson", burstiness=1.0, prompt_tokens=str(PROMPT),
                      output_tokens=str(OUTPUT), dataset=None, no_seed=False, tiers="turbo=0.2,standard=0.8",
                      n_api_keys=1, random_seed=seed, slo=None, knee_method="throughput", knee_k=2.0,
                      knee_metric="ttft", fleet_cost=1.0, tier_cost=None)


def measure(load: LoadOptions, work: Path) -> tuple[Summary, Path]:
    with common.emulated_gateway(work, GPU, MODEL, REPLICAS, SEQS, gateway_yaml) as (url, cfg_path):
        cfg = BenchConfig(
            target=Target(base_url=url, route="/v1/chat/completions", model=MODEL, api_keys=(KEY,),
                          timeout_s=120.0),
            shape=load.shape, qps_start=load.qps_start, qps_end=load.qps_end, steps=load.steps,
            duration_s=load.duration_s, arrivals=load.arrivals, workload=load.workload, random_seed=load.random_seed,
            slo=load.slo, knee=load.knee, cost=load.cost, out=work / "bench", grace_s=10.0, drain_s=30.0,
            live=False, report=False, label="sim_fidelity: measured")
        result = asyncio.run(run_bench(cfg, echo=lambda _msg: None))
        return result.summary, cfg_path


def predict(load: LoadOptions, cfg_path: Path) -> Summary:
    fleet = parse_fleet(common.fidelity_fleet(GPU, MODEL, REPLICAS, SEQS, SCRAPE_S))
    sc = SimConfig(gateway=load_config(cfg_path), fleet=fleet, load=load, api_keys=(KEY,),
                   label="sim_fidelity: predicted")
    return summarize_sim(sc, simulate(sc))


def compare(bench: Summary, sim: Summary) -> dict[str, Any]:
    steps = []
    worst: dict[str, float] = {"ttft_p50": 0.0, "ttft_p95": 0.0, "throughput": 0.0}
    for b, s in zip(bench.steps, sim.steps, strict=True):
        gb, gs = b.tiers[ALL], s.tiers[ALL]
        row = {"offered_rps": round(b.step.offered_rps, 3),
               "bench": {"ttft_p50_s": gb.pct("ttft", "p50"), "ttft_p95_s": gb.pct("ttft", "p95"),
                         "throughput_rps": gb.achieved_rps},
               "sim": {"ttft_p50_s": gs.pct("ttft", "p50"), "ttft_p95_s": gs.pct("ttft", "p95"),
                       "throughput_rps": gs.achieved_rps}}
        err = {"ttft_p50": common.rel_err(gs.pct("ttft", "p50"), gb.pct("ttft", "p50")),
               "ttft_p95": common.rel_err(gs.pct("ttft", "p95"), gb.pct("ttft", "p95")),
               "throughput": common.rel_err(gs.achieved_rps, gb.achieved_rps)}
        for k, v in err.items():
            if v is not None:
                worst[k] = max(worst[k], v)
        row["rel_err"] = {k: None if v is None else round(v, 4) for k, v in err.items()}
        steps.append(row)
    return {"steps": steps, "max_rel_err": {k: round(v, 4) for k, v in worst.items()},
            "within_15pct": all(v <= 0.15 for v in worst.values()),
            "knee_bench": bench.knee(), "knee_sim": sim.knee()}


def fidelity(*, duration: float, steps: int, lo: float = 0.3, hi: float = 1.6, seed: int = 1,
             work: Path | None = None) -> dict[str, Any]:
    load = load_options(duration, steps, lo, hi, seed)
    with tempfile.TemporaryDirectory() as tmp:
        folder = work or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        measured, cfg_path = measure(load, folder)
        predicted = predict(load, cfg_path)
    out = compare(measured, predicted)
    out["setup"] = {"replicas": REPLICAS, "gpu": GPU, "model": MODEL, "max_num_seqs": SEQS, "prompt": PROMPT,
                    "output": OUTPUT, "capacity_rps": round(capacity(), 3), "ramp_rps": [round(load.qps_start, 3),
                    round(load.qps_end, 3)], "duration_s": duration, "steps": steps, "seed": seed}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=240.0, help="seconds of ramp (default 240)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="keep the bench run folder and logs here")
    args = ap.parse_args()
    print(json.dumps(fidelity(duration=args.duration, steps=args.steps, seed=args.seed, work=args.out)))


if __name__ == "__main__":
    main()
