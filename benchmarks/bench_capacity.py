#!/usr/bin/env python3
"""How fast can one bench process send on time?  Prints ONE JSON object.

Starts an instant emulator (``--time-scale 0``) on a free port, then runs the bench's own
open-loop runner at rising constant rates (streaming, short requests) for a few seconds each.
``max_rps`` is the highest rate whose p99 dispatch lag (actual start − scheduled send time) stays
≤ 5 ms; ``lag_p50_ms_at_500`` / ``lag_p99_ms_at_500`` are measured at 500 req/s.  The emulator
shares the machine's cores, so on a small machine it, not the bench, may set the ceiling:
``achieved_rps`` per rate shows that.

    python benchmarks/bench_capacity.py [--trial-s 4] [--max-rate 6000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

from turbogate.bench.arrivals import Arrivals, build_schedule
from turbogate.bench.runner import Runner, Target
from turbogate.bench.shapes import Constant, shape_steps
from turbogate.bench.workload import TruncNormal, Workload
from turbogate.procs import start_emulator

LAG_LIMIT_S = 0.005


async def trial(url: str, model: str, rate: float, seconds: float, seed: int) -> dict[str, float]:
    shape = Constant(rate, seconds)
    wl = Workload(prompt_tokens=TruncNormal(16, 0, 16, 16), output_tokens=TruncNormal(4, 0, 4, 4))
    schedule = build_schedule(shape, Arrivals("poisson"), wl, shape_steps(shape, 1), random.Random(seed))
    async with Runner(Target(base_url=url, route="/v1/completions", model=model, timeout_s=30)) as runner:
        await runner.execute(schedule)
        recs = runner.records
    lags = np.array([r.dispatch_lag_s for r in recs if r.sent_s is not None])
    ok = [r for r in recs if r.ok]
    end = max((r.end_s or 0.0) for r in recs) if recs else seconds
    return {
        "rate": rate,
        "requests": len(recs),
        "ok": len(ok),
        "achieved_rps": round(len(ok) / max(end, seconds), 1),
        "lag_p50_ms": round(float(np.percentile(lags, 50)) * 1000, 3),
        "lag_p99_ms": round(float(np.percentile(lags, 99)) * 1000, 3),
    }


async def main_async(args: argparse.Namespace, url: str) -> dict[str, object]:
    model = "llama-3.2-1b"
    await trial(url, model, 100, 1.0, 0)  # warm up connections and the emulator
    at_500 = await trial(url, model, 500, args.trial_s, 1)
    trials = [at_500]
    max_rps = 500.0 if at_500["lag_p99_ms"] <= LAG_LIMIT_S * 1000 else 0.0
    rate = 1000.0
    while max_rps > 0 and rate <= args.max_rate:
        t = await trial(url, model, rate, args.trial_s, int(rate))
        trials.append(t)
        if t["lag_p99_ms"] > LAG_LIMIT_S * 1000 or t["ok"] < 0.99 * t["requests"]:
            break
        max_rps = rate
        rate += 500.0
    return {
        "max_rps": max_rps,
        "lag_p50_ms_at_500": at_500["lag_p50_ms"],
        "lag_p99_ms_at_500": at_500["lag_p99_ms"],
        "lag_limit_ms": LAG_LIMIT_S * 1000,
        "trial_s": args.trial_s,
        "cpus": os.cpu_count(),
        "trials": trials,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="Dispatch capacity of one bench process.")
    ap.add_argument("--trial-s", type=float, default=4.0, help="Seconds per rate.")
    ap.add_argument("--max-rate", type=float, default=6000.0, help="Stop stepping up here.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        emu = start_emulator("--time-scale", "0", "--model", "llama-3.2-1b", "--gpu", "H100-SXM",
                             "--max-num-seqs", "1024", log_dir=Path(tmp))
        try:
            try:
                import uvloop

                result = uvloop.run(main_async(args, emu.url))
            except ImportError:
                result = asyncio.run(main_async(args, emu.url))
        finally:
            emu.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
