"""Engine steps per wall second at a small and a large decode batch: the cost per step should not
grow with the batch (decoders are tracked by counts, not touched each step).

Closed loop on ``EngineLoop`` in virtual time: Llama-3.1-8B on one H100 SXM, ``--max-num-seqs``
set to the batch, requests of 512 prompt / 256 output tokens, a new one submitted whenever one
finishes, so the batch stays full and nearly every step is a decode step (one request in 256
prefills per step).  KV blocks are plentiful so nothing is preempted.  ``decode_only_rows``
repeat it with outputs that never end while measured: the per-step cost without per-request
work.  Prints ONE JSON object.

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


def measure(batch: int, steps: int, repeats: int, output: int = OUTPUT) -> dict[str, float]:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
    warm = batch + 2 * min(output, OUTPUT)
    blocks = batch * (PROMPT + min(output, warm + steps * repeats + 1)) // 16 + batch + 64
    loop = EngineLoop(Engine(dep, EngineConfig(max_num_seqs=batch, num_gpu_blocks=blocks)))
    ids = 0
    # Staggered start: one request per step until the batch is full, so finishes spread out evenly.
    now = 0.0
    decode_seqs = finished = 0
    start = 0.0
    best = float("inf")  # seconds for `steps` steps, the best of `repeats` rounds (a shared machine is noisy)
    for i in range(warm + steps * repeats):
        if i >= warm and (i - warm) % steps == 0:
            if i > warm:
                best = min(best, time.perf_counter() - start)
            start = time.perf_counter()
        if i < batch:
            loop.submit(Request(f"r{ids}", PROMPT, output), now)
            ids += 1
        t = loop.next_time()
        assert t is not None
        now = t
        result = loop.advance(now)
        for _ in result.finished:
            loop.submit(Request(f"r{ids}", PROMPT, output), now)
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
    batches = [int(b) for b in args.batches.split(",")]
    rows = [measure(b, args.steps, args.repeats) for b in batches]
    # Outputs that never end while measured: nothing arrives or finishes, every step is a pure decode
    # step, so this is the per-step cost alone (the rows above add per-request work: at batch 256 one
    # request arrives and one finishes per step).
    never = 2 * (max(batches) + args.steps * args.repeats)
    decode_only = [measure(b, args.steps, args.repeats, output=never) for b in batches]
    print(json.dumps({
        "shape": {"gpu": "H100-SXM", "model": "llama-3.1-8b", "prompt_tokens": PROMPT, "output_tokens": OUTPUT},
        "rows": rows,
        "cost_ratio_largest_to_smallest": round(rows[-1]["us_per_step"] / rows[0]["us_per_step"], 2),
        "decode_only_rows": [{k: r[k] for k in ("batch", "steps_per_s", "us_per_step", "mean_decode_seqs")}
                             for r in decode_only],
        "decode_only_cost_ratio": round(decode_only[-1]["us_per_step"] / decode_only[0]["us_per_step"], 2),
        "python": sys.version.split()[0],
    }))


if __name__ == "__main__":
    main()
