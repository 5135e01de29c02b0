"""How fast ``turbogate sim`` simulates: requests per wall second on one core.

100 replicas of Llama-3.1-8B on H100-SXM (max 256 seqs), 512 prompt / 256 output tokens,
Poisson arrivals at 80 % of the fleet's perf-model capacity, 10 simulated minutes (``--minutes``
for a quicker run), the full turbogate policy with each replica's limit held at 256, streaming.
Timed: drawing the requests, the event loop and building every RequestRecord (not writing the
run folder).

    python benchmarks/sim_speed.py [--minutes 10] [--replicas 100] [--profile]

prints one JSON object: sim_requests_per_s (and per CPU second), requests, replicas, simulated_s, wall_s,
peak_rss_mb, and ``records_sha256``: a digest of every record (each field's repr, floats exact), so
two builds or two commits can be shown to simulate the very same requests (docs/sim.md, *Speed*).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import hashlib
import json
import pstats
import resource
import sys
import time

from turbogate.bench.options import build_load
from turbogate.config import hash_key, parse_config
from turbogate.perf import deployment, get_gpu, get_model, saturation
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate

GPU, MODEL, SEQS, PROMPT, OUTPUT = "H100-SXM", "llama-3.1-8b", 256, 512, 256


def config(replicas: int, minutes: float, load_share: float) -> tuple[SimConfig, float]:
    per_replica = saturation(deployment(get_gpu(GPU), get_model(MODEL)), PROMPT + 1, OUTPUT,
                             max_num_seqs=SEQS).request_rate
    qps = load_share * replicas * per_replica
    gw = parse_config({
        "tenants": [{"name": "t", "key_sha256": hash_key("k"), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "llama", "models": [MODEL], "replicas": [{"url": "http://sim", "max_concurrency": SEQS}]}],
        # Each replica's limit held at its seqs: every request is served (the adaptive limit's
        # cuts would shed many cheaply and flatter the figure; docs/sim.md).
        "concurrency": {"initial": SEQS, "queue_tolerance": 1000},
    })
    fleet = parse_fleet({"pools": [{"name": "llama", "replicas": [
        {"count": replicas, "gpu": GPU, "model": MODEL, "max_num_seqs": SEQS}]}]})
    load = build_load(shape="constant", qps=qps, qps_start=None, qps_end=None, steps=1, duration=minutes * 60,
                      arrivals="poisson", burstiness=1.0, prompt_tokens=str(PROMPT), output_tokens=str(OUTPUT),
                      dataset=None, no_seed=False, tiers="turbo=0.2,standard=0.8", n_api_keys=0, random_seed=1,
                      slo=None, knee_method="throughput", knee_k=2.0, knee_metric="e2e", fleet_cost=1.0,
                      tier_cost=None)
    return SimConfig(gateway=gw, fleet=fleet, load=load, chat=False), qps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="simulated minutes (default 10)")
    ap.add_argument("--replicas", type=int, default=100)
    ap.add_argument("--load", type=float, default=0.8, help="share of the perf-model capacity (default 0.8)")
    ap.add_argument("--profile", action="store_true", help="cProfile the run; top 25 by own time to stderr")
    args = ap.parse_args()
    sc, qps = config(args.replicas, args.minutes, args.load)
    prof = cProfile.Profile() if args.profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.enable()
    out = simulate(sc)
    if prof is not None:
        prof.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if prof is not None:
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    ok = sum(1 for r in out.records if r.ok)
    digest = hashlib.sha256()
    for record in out.records:  # after the timing: the digest is not part of the figure
        digest.update(repr(dataclasses.astuple(record)).encode())
    print(json.dumps({
        "sim_requests_per_s": round(len(out.records) / wall, 1), "requests": len(out.records), "ok": ok,
        # On a shared machine the CPU time this process got is the fairer clock.
        "sim_requests_per_cpu_s": round(len(out.records) / cpu, 1), "cpu_s": round(cpu, 2),
        "replicas": args.replicas, "offered_rps": round(qps, 1), "simulated_s": round(out.duration_s, 1),
        "wall_s": round(wall, 2), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "profiled": args.profile, "records_sha256": digest.hexdigest(),
    }))


if __name__ == "__main__":
    main()
