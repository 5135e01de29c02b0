"""Emulated offline throughput of Llama-3.1-8B on one H100 SXM vs a published measurement.

Reference: TensorRT-LLM "Performance Overview" (docs/source/performance/perf-overview.md in
NVIDIA/TensorRT-LLM, commit 00f37686aa854010d68bcbd0f4ab000221541ca6), table "Llama 3.1 8B",
column "H100 TP1 (FP8)": nvidia/Llama-3.1-8B-Instruct-FP8, trtllm-bench offline throughput
(all requests queued at once, PyTorch backend, fixed ISL/OSL), metric "Total Output
Throughput (tokens/sec)", KV cache at 0.95 of free memory where it fit.

The emulator runs the same shape in virtual time: N requests queued at t=0 on
``Engine(deployment(H100-SXM, llama-3.1-8b, weight_dtype=fp8, gpu_mem_util=0.95))`` and
output tokens / total virtual seconds.  Prints ONE JSON object.

    python benchmarks/engine_calibration.py [--max-num-seqs 1024] [--requests 1500]
"""

from __future__ import annotations

import argparse
import json

from turbogate.engine import Engine, EngineConfig, Request
from turbogate.perf import deployment, get_gpu, get_model

# (ISL, OSL) -> published output tokens/s, H100 SXM TP1 FP8, TensorRT-LLM perf overview.
PUBLISHED = {
    (128, 128): 28_312,
    (128, 2048): 22_714,
    (500, 2000): 17_660,
    (1000, 1000): 15_220,
    (2048, 128): 3_450,
    (2048, 2048): 9_305,
}


def emulate(isl: int, osl: int, n: int, max_num_seqs: int, max_batched: int, dtype: str, kv: str, mem: float) -> float:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"), weight_dtype=dtype, kv_dtype=kv,
                     gpu_mem_util=mem)
    eng = Engine(dep, EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_batched))
    for i in range(n):
        eng.add_request(Request(str(i), isl, osl), 0.0)
    now = 0.0
    while eng.has_work():
        now += eng.step(now).duration
    return n * osl / now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-num-seqs", type=int, default=1024)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--dtype", default="fp8")
    parser.add_argument("--kv-cache-dtype", default="fp8", help="the FP8 checkpoint quantizes the KV cache too")
    args = parser.parse_args()
    rows = []
    for (isl, osl), published in PUBLISHED.items():
        emulated = emulate(isl, osl, args.requests, args.max_num_seqs, args.max_num_batched_tokens, args.dtype,
                           args.kv_cache_dtype, 0.95)
        rows.append({"isl": isl, "osl": osl, "published_output_tok_s": published,
                     "emulated_output_tok_s": round(emulated), "ratio": round(emulated / published, 2)})
    ratios = [r["ratio"] for r in rows]
    print(json.dumps({
        "reference": "TensorRT-LLM perf-overview, Llama 3.1 8B, H100 SXM TP1 FP8, trtllm-bench offline",
        "emulator": {"gpu": "H100-SXM", "model": "llama-3.1-8b", "weight_dtype": args.dtype,
                     "kv_cache_dtype": args.kv_cache_dtype, "gpu_mem_util": 0.95,
                     "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
                     "requests": args.requests},
        "rows": rows,
        "worst_ratio": max(ratios, key=lambda r: max(r, 1 / r)),
        "within_2x": all(0.5 <= r <= 2.0 for r in ratios),
    }))


if __name__ == "__main__":
    main()
