"""Engine steps per wall second at a small and a large decode batch: the cost per step should not
grow with the batch (decoders are tracked by counts, not touched each step).

Closed loop on ``EngineLoop`` in virtual time: Llama-3.1-8B on one H100 SXM, ``--max-num-seqs``
set to the batch, requests of 512 prompt / 256 output tokens, a new one submitted whenever one
finishes, so the batch stays full and nearly every step is a decode step (one request in 256
prefills per step).  KV blocks are plentiful so nothing is preempted.  Prints ONE JSON object.

    python benchmarks/engine_step_speed.py [--steps 10000] [--repeats 5] [--batches 16,256]

Each figure is the fastest of ``--repeats`` rounds of ``--steps`` steps (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from turbogate.engine import Engine, EngineConfig, EngineLoop, Request
from turbogate.perf import deployment, get_gpu, get_model

PROMPT, OUTPUT = 512, 256


def measure(batch: int, steps: int, repeats: int) -> dict[str, float]:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
    blocks = batch * (PROMPT + OUTPUT) // 16 + batch + 64
    loop = EngineLoop(Engine(dep, EngineConfig(max_num_seqs=batch, num_gpu_blocks=blocks)))
    ids = 0
    # Staggered start: one request per step until the batch is full, so finishes spread out evenly.
    now = 0.0
    warm = batch + 2 * OUTPUT
    decode_seqs = finished = 0
    start = 0.0
    best = float("inf")  # seconds for `steps` steps, the best of `repeats` rounds (a shared machine is noisy)
    for i in range(warm + steps * repeats):
        if i >= warm and (i - warm) % steps == 0:
            if i > warm:
                best = min(best, time.perf_counter() - start)
            start = time.perf_counter()
        if i < batch:
            loop.submit(Request(f"r{ids}", PROMPT, OUTPUT), now)
            ids += 1
        t = loop.next_time()
        assert t is not None
        now = t
        result = loop.advance(now)
        for _ in result.finished:
            loop.submit(Request(f"r{ids}", PROMPT, OUTPUT), now)
            ids += 1
        if i >= warm:
            decode_seqs += result.decode_seqs
            finished += len(result.finished)
    wall = min(best, time.perf_counter() - start)
    measured = steps * repeats
    return {"batch": batch, "steps_per_s": round(steps / wall), "us_per_step": round(wall / steps * 1e6, 2),
            "mean_decode_seqs": round(decode_seqs / measured, 1), "finished_per_step": round(finished / measured, 3),
            "virtual_s": round(now, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000, help="steps per measured round")
    parser.add_argument("--batches", default="16,256", help="max-num-seqs values (comma list)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of --steps; the fastest counts")
    args = parser.parse_args()
    rows = [measure(int(b), args.steps, args.repeats) for b in args.batches.split(",")]
    print(json.dumps({
        "shape": {"gpu": "H100-SXM", "model": "llama-3.1-8b", "prompt_tokens": PROMPT, "output_tokens": OUTPUT},
        "rows": rows,
        "cost_ratio_largest_to_smallest": round(rows[-1]["us_per_step"] / rows[0]["us_per_step"], 2),
        "python": sys.version.split()[0],
    }))


if __name__ == "__main__":
    main()
