"""The knee guard on the bench: A (guard off) / B (guard on) through real emulators, one short ramp.

Two emulators (L4, Llama-3.1-8B, 8 seqs, ``--time-scale 1``) behind a real gateway
(``turbogate.procs``), driven by ``bench`` on a stepped ramp from 0.5× to 2× the fleet's knee
with half the requests asking Turbo — the setup of benchmarks/guard_abc.py, which simulates the
same thing.  The knee is measured first by a simulated ramp (the simulator matches these
emulators' knee within a few per cent: docs/sim.md, "Fidelity") and handed to B as a run folder
(``knee_from``).  Per band: the same figures as guard_abc.py (Turbo p95 TTFT of requests served
Turbo, Standard p95 TTFT, goodput, shed rate, cost and billed price per 1k answers).

    python benchmarks/guard_bench.py [--step-s 30] [--steps 4] [--out runs/guard-bench]

prints one JSON object.  It runs real processes: on a shared 2-core machine the latencies are the
machine's as much as the gateway's; say so beside any figure quoted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from guard_abc import KEY, MODEL, REPLICAS, SEQS, bands, gateway_data, load_options, markdown, run_sim
from turbogate.bench.options import LoadOptions
from turbogate.bench.run import BenchConfig, run_bench
from turbogate.bench.runner import Target
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results import RequestRecord, Summary, write_run


def bench(gw: dict[str, Any], urls: list[str], load: LoadOptions, work: Path, label: str) -> tuple[
        list[RequestRecord], Summary]:
    """One bench run through a fresh gateway with config ``gw`` in front of ``urls``."""
    gw = dict(gw)
    gw["pools"] = [{**gw["pools"][0], "replicas": [{"url": u, "engine": "emulator", "max_concurrency": SEQS}
                                                   for u in urls]}]
    cfg_path = work / f"gateway-{label}.yaml"
    cfg_path.write_text(yaml.safe_dump(gw, sort_keys=False))
    svc = start_gateway(cfg_path, log_dir=work / "logs")
    try:
        cfg = BenchConfig(
            target=Target(base_url=svc.url, route="/v1/chat/completions", model=MODEL, api_keys=(KEY,),
                          timeout_s=120.0),
            shape=load.shape, qps_start=load.qps_start, qps_end=load.qps_end, steps=load.steps,
            duration_s=load.duration_s, arrivals=load.arrivals, workload=load.workload, random_seed=load.random_seed,
            slo=load.slo, knee=load.knee, cost=load.cost, out=work / f"bench-{label}", grace_s=10.0, drain_s=40.0,
            live=False, report=False, label=f"guard_bench: {label}")
        result = asyncio.run(run_bench(cfg, echo=lambda _msg: None))
        return list(result.records), result.summary
    finally:
        with contextlib.suppress(Exception):
            svc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-s", type=float, default=30.0, help="seconds per load band (default 30)")
    ap.add_argument("--steps", type=int, default=4, help="load bands from 0.5× to 2× the knee (default 4)")
    ap.add_argument("--turbo-share", type=float, default=0.5)
    ap.add_argument("--turbo-slo-ms", type=float, default=500.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="keep the run folders and logs here")
    ap.add_argument("--table", action="store_true", help="also write the Markdown tables to stderr")
    args = ap.parse_args()
    slo = {"turbo": args.turbo_slo_ms / 1000}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        probe_records, probe = run_sim(gateway_data(), load_options(1.0, 9.0, 9, 60.0, args.seed, args.turbo_share),
                                       "guard_bench: knee probe (sim)")
        knee = probe.knee()
        if knee is None:
            raise SystemExit("the simulated knee probe found no knee")
        run_dir = write_run(work / "knee-probe", probe_records, [], probe, report=False)
        load = load_options(0.5 * knee, 2.0 * knee, args.steps, args.step_s, args.seed, args.turbo_share)
        emulators: list[Service] = []
        runs: dict[str, list[RequestRecord]] = {}
        ref: Summary | None = None
        try:
            for _ in range(REPLICAS):
                emulators.append(start_emulator("--gpu", "L4", "--model", MODEL, "--max-num-seqs", str(SEQS),
                                                "--time-scale", "1", log_dir=work / "logs"))
            urls = [e.url for e in emulators]
            for name, gw in {"A": gateway_data(), "B": gateway_data({"knee_from": str(run_dir)})}.items():
                runs[name], summ = bench(gw, urls, load, work, name)
                ref = ref or summ
        finally:
            for e in emulators:
                with contextlib.suppress(Exception):
                    e.stop()
    assert ref is not None
    rows = bands(runs, ref, knee, slo, 1.0)
    top = rows[-1]
    t95 = top["B"]["turbo_p95_ttft_s"]
    out = {"setup": {"replicas": REPLICAS, "gpu": "L4", "model": MODEL, "max_num_seqs": SEQS,
                     "turbo_share_asked": args.turbo_share, "step_s": args.step_s, "steps": args.steps,
                     "seed": args.seed, "slo_ttft_s": slo, "knee_rps_sim": round(knee, 3),
                     "note": "real processes: the latencies are also the machine's"},
           "bands": rows,
           "at_2x": {"turbo_p95_ttft_s": {"A": top["A"]["turbo_p95_ttft_s"], "B": t95},
                     "turbo_p95_within_slo_B": t95 is not None and t95 <= slo["turbo"],
                     "goodput_rps": {"A": top["A"]["goodput_rps"], "B": top["B"]["goodput_rps"]}}}
    print(json.dumps(out))
    if args.table:
        sys.stderr.write(markdown(rows, ["A", "B"]) + "\n")


if __name__ == "__main__":
    main()
