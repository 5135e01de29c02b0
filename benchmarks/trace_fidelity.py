"""Does ``sim --trace`` predict what ``bench --trace`` measures?  A real trace window, both ways.

The Azure LLM conversation trace (shared/traces, CC BY 4.0: see its README), a 10-minute window,
replayed at two speeds chosen so that a two-emulator fleet (A100-80G, Llama-3.1-8B, 16 sequences
each, ``--time-scale 1``) sees the window's busiest minute at about 0.8× and about 1.5× its
perf-model capacity (at the window's mean prompt and output lengths).  An A100 rather than an H100
(``--gpu``): the slower fleet streams fewer tokens a second at the same share of its capacity
(1,300–2,300 against 2,100–3,300), which a busy 2-core machine can keep pace with.  Tiers: 20 %
Turbo by a stable hash of each request.  Measured: ``bench --trace`` through a real gateway in
front of the two emulators (fresh processes per speed).  Predicted: ``sim --trace`` with the same
gateway config, a fleet file describing those emulators, and the same replay.  Per tier: p50 and
p95 TTFT; per minute of the trace: throughput (all tiers and per tier); sim against bench.

    python benchmarks/trace_fidelity.py [--window 0:600] [--loads 0.8,1.5] [--gpu A100-80G-SXM] [--seqs 16]
                                        [--out runs/trace-fidelity]

prints one JSON object: each load's figures side by side, ``max_rel_err`` and ``within_10pct`` over the
tiers (what the issue asks), and the same for every request together (``all_tiers_rel_err``,
``all_tiers_within_10pct``): the mixture's p95 falls where its curve is steep (between Turbo's
tail and Standard's), so a few per cent in Standard's tail can move it by more than 10 %.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import common  # what the benchmarks share (benchmarks/common.py)
from turbogate.bench.options import LoadOptions, build_load, with_trace
from turbogate.bench.run import BenchConfig, run_bench
from turbogate.bench.runner import Target
from turbogate.config import load_config
from turbogate.perf import deployment, get_gpu, get_model, saturation
from turbogate.results import ALL, Summary
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate, summarize_sim
from turbogate.trace.importers import load_trace
from turbogate.trace.replay import ReplayOptions, parse_window, plan_replay, rate_series

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "azure-llm-2023-conv.csv"
KEY = "sk-trace-fidelity"
MODEL, REPLICAS, SCRAPE_S, TIERS = "llama-3.1-8b", 2, 0.5, "turbo=0.2,standard=0.8"


def capacity(gpu: str, seqs: int, prompt: float, output: float) -> float:
    """Fleet req/s per the perf model at the window's mean lengths."""
    dep = deployment(get_gpu(gpu), get_model(MODEL))
    return REPLICAS * saturation(dep, prompt, output, max_num_seqs=seqs).request_rate


def gateway_yaml(urls: list[str], seqs: int) -> str:
    return common.fidelity_gateway_yaml("azure", KEY, MODEL, urls, seqs, SCRAPE_S)


def load_options(trace: Path, window: str, speedup: float, seed: int) -> LoadOptions:
    base = build_load(shape=None, qps=None, qps_start=None, qps_end=None, steps=10, duration=60.0,
                      arrivals="poisson", burstiness=1.0, prompt_tokens="1", output_tokens="1", dataset=None,
                      no_seed=False, tiers=TIERS, n_api_keys=1, random_seed=seed, slo=None, knee_method="throughput",
                      knee_k=2.0, knee_metric="ttft", fleet_cost=1.0, tier_cost=None)
    return with_trace(base, trace, speedup=speedup, window=window)


def measure(load: LoadOptions, work: Path, gpu: str, seqs: int) -> tuple[Summary, Path]:
    with common.emulated_gateway(work, gpu, MODEL, REPLICAS, seqs, lambda urls: gateway_yaml(urls, seqs)) as (
            url, cfg_path):
        cfg = BenchConfig(
            target=Target(base_url=url, route="/v1/chat/completions", model=MODEL, api_keys=(KEY,),
                          timeout_s=120.0),
            shape=load.shape, steps=load.steps, duration_s=load.duration_s, workload=load.workload,
            random_seed=load.random_seed, slo=load.slo, knee=load.knee, cost=load.cost, out=work / "bench",
            grace_s=10.0, drain_s=60.0, live=False, report=True, label="trace_fidelity: measured",
            trace=load.trace)
        result = asyncio.run(run_bench(cfg, echo=lambda _msg: None))
        return result.summary, cfg_path


def predict(load: LoadOptions, cfg_path: Path, gpu: str, seqs: int) -> tuple[Summary, float]:
    fleet = parse_fleet(common.fidelity_fleet(gpu, MODEL, REPLICAS, seqs, SCRAPE_S))
    sc = SimConfig(gateway=load_config(cfg_path), fleet=fleet, load=load, api_keys=(KEY,),
                   label="trace_fidelity: predicted",
                   extra={"trace": load.trace.describe()} if load.trace is not None else {})
    cpu = time.process_time()
    outcome = simulate(sc)
    return summarize_sim(sc, outcome), time.process_time() - cpu


def _r(x: float | None, n: int = 4) -> float | None:
    return None if x is None else round(x, n)


def compare(bench: Summary, sim: Summary) -> dict[str, Any]:
    tiers: dict[str, Any] = {}
    per_tier = {"ttft_p50": 0.0, "ttft_p95": 0.0, "throughput_per_minute": 0.0}
    together = dict(per_tier)
    for tier in bench.tiers:
        gb, gs = bench.overall[tier], sim.overall.get(tier)
        if gs is None:
            continue
        worst = together if tier == ALL else per_tier
        row: dict[str, Any] = {"requests": gb.requests, "shed_bench": gb.shed, "shed_sim": gs.shed}
        for stat in ("p50", "p95"):
            b, s = gb.pct("ttft", stat), gs.pct("ttft", stat)
            err = common.rel_err(s, b)
            row[f"ttft_{stat}_s"] = {"bench": _r(b), "sim": _r(s), "rel_err": _r(err)}
            if err is not None:
                worst[f"ttft_{stat}"] = max(worst[f"ttft_{stat}"], err)
        minutes = []
        for sb, ss in zip(bench.steps, sim.steps, strict=True):
            b_rpm = sb.tiers[tier].achieved_rps * 60 if tier in sb.tiers else 0.0
            s_rpm = ss.tiers[tier].achieved_rps * 60 if tier in ss.tiers else 0.0
            err = common.rel_err(s_rpm, b_rpm)
            minutes.append({"bench_rpm": _r(b_rpm, 2), "sim_rpm": _r(s_rpm, 2), "rel_err": _r(err)})
            if err is not None:
                worst["throughput_per_minute"] = max(worst["throughput_per_minute"], err)
        row["throughput_per_step"] = minutes
        tiers[tier] = row
    return {"tiers": tiers, "max_rel_err": {k: round(v, 4) for k, v in per_tier.items()},
            "within_10pct": all(v <= 0.10 for v in per_tier.values()),
            "all_tiers_rel_err": {k: round(v, 4) for k, v in together.items()},
            "all_tiers_within_10pct": all(v <= 0.10 for v in together.values())}


def run(trace: Path, window: str, loads: list[float], gpu: str, seqs: int, seed: int,
        work: Path | None) -> dict[str, Any]:
    lo, hi = parse_window(window)
    replay = plan_replay(load_trace(trace), ReplayOptions(window=(lo, hi)))
    items = replay.items
    peak = max(r for _, r in rate_series([i.t for i in items], replay.duration_s, 60.0))
    prompt = sum(i.prompt_tokens for i in items) / len(items)
    output = sum(i.output_tokens for i in items) / len(items)
    cap = capacity(gpu, seqs, prompt, output)
    out: dict[str, Any] = {"setup": {
        "trace": trace.name, "window_s": [lo, replay.window[1]], "requests": len(items),
        "peak_minute_rps": round(peak, 3), "mean_prompt_tokens": round(prompt, 1),
        "mean_output_tokens": round(output, 1), "replicas": REPLICAS, "gpu": gpu, "model": MODEL,
        "max_num_seqs": seqs, "capacity_rps": round(cap, 3), "tiers": TIERS, "seed": seed,
        "attribution": replay.attribution}, "loads": []}
    with tempfile.TemporaryDirectory() as tmp:
        for x in loads:
            speedup = x * cap / peak
            folder = (work or Path(tmp)) / f"load-{x:g}"
            folder.mkdir(parents=True, exist_ok=True)
            load = load_options(trace, window, speedup, seed)
            before, t0 = os.getloadavg()[0], time.time()
            measured, cfg_path = measure(load, folder, gpu, seqs)
            predicted, sim_cpu = predict(load, cfg_path, gpu, seqs)
            row = {"peak_vs_capacity": x, "speedup": round(speedup, 4), "replay_s": round(load.duration_s, 1),
                   "bench_wall_s": round(time.time() - t0, 1), "sim_cpu_s": round(sim_cpu, 2),
                   "loadavg_before_after": [round(before, 2), round(os.getloadavg()[0], 2)],
                   "bench_dispatch_lag_p99_ms": _r((measured.overall[ALL].pct("lag", "p99") or 0.0) * 1000, 3),
                   **compare(measured, predicted)}
            out["loads"].append(row)
    worst = {k: max(r["max_rel_err"][k] for r in out["loads"]) for k in out["loads"][0]["max_rel_err"]}
    out["max_rel_err"] = worst
    out["within_10pct"] = all(r["within_10pct"] for r in out["loads"])
    out["all_tiers_within_10pct"] = all(r["all_tiers_within_10pct"] for r in out["loads"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE, help=f"default {TRACE}")
    ap.add_argument("--window", default="0:600", help="trace seconds START:END (default 0:600)")
    ap.add_argument("--loads", default="0.8,1.5", help="the busiest minute as multiples of capacity")
    ap.add_argument("--gpu", default="A100-80G-SXM")
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="keep the bench run folders and logs here")
    args = ap.parse_args()
    if not args.trace.exists():
        raise SystemExit(f"trace_fidelity: no trace at {args.trace} (shared/traces beside the clone; or --trace)")
    loads = [float(x) for x in args.loads.split(",")]
    print(json.dumps(run(args.trace, args.window, loads, args.gpu, args.seqs, args.seed, args.out)))


if __name__ == "__main__":
    main()
