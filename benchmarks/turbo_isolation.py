"""Does Turbo keep its latency at 2× overload with the default config?  (issue 19)

Two real emulators (L4, llama-3.1-8b, 16 sequences, --time-scale 0.2) behind a real gateway
whose config sets no ``max_concurrency`` and no tier policy of its own (the defaults), loaded by
``turbo-bench`` at 0.2× and 2× the fleet's capacity with a Turbo / Standard / Relax mix.  The
capacity is computed, not assumed: the same engine model run to saturation in virtual time.

Prints one JSON object:
- ``turbo_p95_ttft_ratio``: Turbo p95 TTFT at 2× ÷ at 0.2× (target ≤ 1.5), after a warm-up at
  the same load (the gateway learns each engine's concurrency in its first seconds); the cold
  figure, warm-up included, is ``turbo_p95_ttft_ratio_cold``;
- ``turbo_shed_at_2x`` (target 0), ``standard_share_at_2x`` (≥ the configured min_share),
  ``relax_completed_at_2x`` (> 0).

    python benchmarks/turbo_isolation.py [--duration 40] [--warmup 10]
    python benchmarks/turbo_isolation.py --simulate 1,2,3   # the same run in virtual time, per seed

``--simulate`` runs the set-up in the simulator instead (no processes, about a second a seed):
the same fleet and config, the emulator's engine profile, the scrape interval of 1 s at the time
scale (5 s of engine time), 0.2× then 2× in one run of two ``--warmup + --duration`` steps, the
2× step measured after its first ``--warmup`` seconds; figures in wall seconds.  That run keeps
engine time, so every other time of the gateway's (each tier's objective, queue budget and CoDel
target, Turbo's patience) is five times shorter against the engines than in the real run.
``--wall-time`` runs the engines five times faster instead (as the emulator's ``--time-scale``
does, ``soak_virtual._faster``), so virtual seconds are the real run's wall seconds and the
gateway's times mean the same: the faithful run (docs/sim.md, "Time-scaled fleets").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import yaml

from turbogate.bench.options import build_load
from turbogate.bench.workload import TierMix
from turbogate.config import _default_tiers, hash_key, parse_config
from turbogate.engine import EngineConfig
from turbogate.engine.capacity import saturated_rate
from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.procs import start_emulator, start_gateway
from turbogate.results.io import read_jsonl
from turbogate.results.percentile import percentile
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate

GPU, MODEL, SEQS, SCALE = "L4", "llama-3.1-8b", 16, 0.2
PROMPT, OUTPUT = 256, 128
KEY = "sk-isolation"
MIX = "turbo=0.2,standard=0.75,relax=0.05"


def capacity_rps(replicas: int = 2, seqs: int = SEQS) -> float:
    """Requests/s the fleet completes at saturation, from the engine model in virtual time,
    converted to wall time at ``SCALE``."""
    dep = deployment(get_gpu(GPU), resolve_model(MODEL))  # the emulator's defaults (bf16, 0.9 of memory)
    return replicas * saturated_rate(dep, EngineConfig(max_num_seqs=seqs), PROMPT, OUTPUT) / SCALE


def bench(url: str, qps: float, duration: float, out: Path) -> list[dict[str, object]]:
    cmd = [sys.executable, "-m", "turbogate", "bench", "--host", url, "--api-key", KEY, "--model", MODEL,
           "--qps", f"{qps:.3f}", "--duration", str(duration), "--tiers", MIX,
           "--prompt-tokens", f"{PROMPT}:0:{PROMPT}:{PROMPT}", "--output-tokens", f"{OUTPUT}:0:{OUTPUT}:{OUTPUT}",
           "--out", str(out), "--no-live", "--no-report", "--drain", "60"]
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return list(read_jsonl(out / "requests.jsonl"))


p95 = partial(percentile, q=95)


def turbo_ttfts(records: list[dict[str, object]]) -> list[float]:
    return [float(r["ttft_s"]) for r in records  # type: ignore[arg-type]
            if r.get("tier_asked") == "turbo" and r.get("ok") and r.get("ttft_s") is not None]


def simulated(seed: int, duration: float, warmup: float) -> dict[str, object]:
    """One seed of the run in virtual time (see the module docstring)."""
    cap = capacity_rps() * SCALE  # engine seconds
    gateway = parse_config({
        "tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "scrape": {"interval_s": 1.0 / SCALE},
        "pools": [{"name": "p", "models": [MODEL], "replicas": [{"url": f"http://r{i}"} for i in range(2)]}],
    })
    fleet = parse_fleet({"pools": [{"name": "p", "replicas": [
        {"count": 2, "gpu": GPU, "model": MODEL, "max_num_seqs": SEQS}]}]})
    hold = warmup + duration
    load = build_load(shape="steps", qps=None, qps_start=0.2 * cap, qps_end=2.0 * cap, steps=2,
                      duration=2 * hold / SCALE, arrivals="poisson", burstiness=1.0, prompt_tokens=str(PROMPT),
                      output_tokens=str(OUTPUT), dataset=None, no_seed=False, tiers=MIX, n_api_keys=1,
                      random_seed=seed, slo=None, knee_method="throughput", knee_k=2.0, knee_metric="e2e",
                      fleet_cost=1.0, tier_cost=None)
    records = simulate(SimConfig(gateway=gateway, fleet=fleet, load=load, api_keys=(KEY,))).records
    turbo = [r for r in records if r.tier_asked == "turbo"]
    light = [SCALE * r.ttft_s for r in turbo if r.ok and r.ttft_s is not None and SCALE * r.scheduled_s < hold]
    heavy = [r for r in turbo if SCALE * r.scheduled_s >= hold + warmup]
    base = p95(light)
    hot = p95([SCALE * r.ttft_s for r in heavy if r.ok and r.ttft_s is not None])
    return {"seed": seed, "turbo_p95_ttft_s": {"light": base, "heavy": hot},
            "turbo_p95_ttft_ratio": None if not base or hot is None else round(hot / base, 3),
            "turbo_shed_at_2x": sum(1 for r in heavy if r.status in (429, 503))}


def simulated_wall_time(seed: int, duration: float, warmup: float) -> dict[str, object]:
    """One seed in virtual time with engines ``1 / SCALE`` times faster (``--wall-time``): the
    gateway's objectives and budgets mean what they do in the real run.  Beside Turbo's ratio,
    per tier at 2× (after the warm-up): requests, those answered, and p50 / p95 TTFT."""
    from soak_virtual import sim_sent  # imports this module: loaded only here

    mix = TierMix.parse(MIX).weights
    cap, hold = capacity_rps(), warmup + duration
    sent = sim_sent(2, SEQS, [(0.0, hold, 0.2 * cap, mix), (hold, hold, 2.0 * cap, mix)],
                    [(0.0, 0.01, 0.1, mix)], seed)
    tiers: dict[str, dict[str, object]] = {}
    for tier, _ in mix:
        heavy = [ttft for at, t, ttft in sent if t == tier and at >= hold + warmup]
        answered = [ttft for ttft in heavy if ttft < float("inf")]
        tiers[tier] = {"requests": len(heavy), "answered": len(answered),
                       "ttft_p50_s": percentile(answered, 50), "ttft_p95_s": p95(answered)}
    base = p95([ttft for at, t, ttft in sent if t == "turbo" and at < hold and ttft < float("inf")])
    hot = tiers["turbo"]["ttft_p95_s"]
    return {"seed": seed, "clock": "wall", "turbo_p95_ttft_s": {"light": base, "heavy": hot},
            "turbo_p95_ttft_ratio": None if not base or not isinstance(hot, float) else round(hot / base, 3),
            "tiers_at_2x": tiers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=40.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders and logs here")
    ap.add_argument("--simulate", default=None, metavar="SEEDS",
                    help="comma-separated seeds: run in the simulator instead (one JSON object per seed)")
    ap.add_argument("--wall-time", action="store_true",
                    help="with --simulate: engines 1/SCALE faster, so the gateway's objectives and budgets mean "
                         "what they do in the real run (the faithful simulation)")
    args = ap.parse_args()
    if args.simulate:
        simulate_one = simulated_wall_time if args.wall_time else simulated
        for seed in (int(s) for s in args.simulate.split(",") if s):
            print(json.dumps(simulate_one(seed, args.duration, args.warmup)), flush=True)
        return
    cap = capacity_rps()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        emulators = [start_emulator("--gpu", GPU, "--model", MODEL, "--max-num-seqs", str(SEQS),
                                    "--time-scale", str(SCALE), log_dir=folder) for _ in range(2)]
        config = {
            "tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
            "pools": [{"name": "p", "models": [MODEL],
                       "replicas": [{"url": e.url, "engine": "emulator"} for e in emulators]}],
        }
        (folder / "gw.yaml").write_text(yaml.safe_dump(config))
        gateway = start_gateway(folder / "gw.yaml", log_dir=folder)
        try:
            light = bench(gateway.url, 0.2 * cap, args.duration, folder / "light")
            run = bench(gateway.url, 2.0 * cap, args.warmup + args.duration, folder / "heavy")
            # One continuous run at 2×: its first seconds are the warm-up (the gateway learns the
            # engines' limits and Turbo's share of the pool builds up), the rest is measured.
            cold = [r for r in run if float(r["scheduled_s"]) < args.warmup]  # type: ignore[arg-type]
            heavy = [r for r in run if float(r["scheduled_s"]) >= args.warmup]  # type: ignore[arg-type]
        finally:
            gateway.stop()
            for e in emulators:
                e.stop()
    base = p95(turbo_ttfts(light))
    hot = p95(turbo_ttfts(heavy))
    hot_cold = p95(turbo_ttfts(cold + heavy))
    done = [r for r in heavy if r.get("ok")]
    share = sum(1 for r in done if r.get("tier_served") == "standard") / max(1, len(done))
    result = {
        "capacity_rps": round(cap, 2),
        "offered_rps": {"light": round(0.2 * cap, 2), "heavy": round(2.0 * cap, 2)},
        "mix": MIX,
        "turbo_p95_ttft_s": {"light": base, "heavy": hot},
        "turbo_p95_ttft_ratio": None if not base or hot is None else round(hot / base, 3),
        "turbo_p95_ttft_ratio_cold": None if not base or hot_cold is None else round(hot_cold / base, 3),
        "turbo_shed_at_2x": sum(1 for r in heavy if r.get("tier_asked") == "turbo" and r.get("status") in (429, 503)),
        "turbo_errors_at_2x": sum(1 for r in heavy if r.get("tier_asked") == "turbo" and not r.get("ok")),
        "standard_share_at_2x": round(share, 3),
        "standard_min_share": _default_tiers()["standard"].min_share,
        "relax_completed_at_2x": sum(1 for r in done if r.get("tier_served") == "relax"),
        "completed_at_2x": len(done),
        "requests_at_2x": len(heavy),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
