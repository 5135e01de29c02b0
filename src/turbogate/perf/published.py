"""Published offline-throughput measurements the perf model is checked against (data only).

TRTLLM: NVIDIA TensorRT-LLM "Performance Overview", docs/source/performance/perf-overview.md in
NVIDIA/TensorRT-LLM at commit 00f37686aa854010d68bcbd0f4ab000221541ca6.  trtllm-bench throughput
(all requests queued at once), PyTorch backend, fixed ISL/OSL, metric "Total Output Throughput
(tokens/sec)"; checkpoints nvidia/Llama-3.1-8B-Instruct-FP8 and nvidia/Llama-3.3-70B-Instruct-FP8
(FP8 weights and FP8 KV cache), KV cache at 0.95 of free memory where it fit.  ``requests`` is the
``$num_requests`` that page lists for the shape.
"""

from __future__ import annotations

from typing import NamedTuple

TRTLLM_SOURCE = ("NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md @ "
                 "00f37686aa854010d68bcbd0f4ab000221541ca6, trtllm-bench offline throughput, FP8")


class Cell(NamedTuple):
    """One published measurement: ``output_tok_s`` for ``requests`` requests of ``isl``/``osl`` tokens."""

    model: str  # turbogate catalog name
    gpu: str  # turbogate catalog name
    tp: int
    isl: int
    osl: int
    output_tok_s: float  # published Total Output Throughput
    requests: int
    dtype: str = "fp8"
    kv_dtype: str = "fp8"
    gpu_mem_util: float = 0.95
    uniform_lengths: bool = False  # lengths drawn uniformly from 1..isl and 1..osl (else exactly isl, osl)
    source: str = TRTLLM_SOURCE
    kv_bw_efficiency: float | None = None  # the engine's KV read efficiency (PerfFactors), None: as weights


_REQUESTS = {(128, 128): 30000, (1000, 1000): 3000, (2048, 128): 3000, (5000, 500): 1500, (20000, 2000): 1000}
_SHAPES = tuple(_REQUESTS)

# (model, gpu, tp) -> published output tok/s per shape, in _SHAPES order.
_TABLE: dict[tuple[str, str, int], tuple[int, ...]] = {
    ("llama-3.1-8b", "H100-SXM", 1): (28_312, 15_220, 3_450, 3_459, 1_351),
    ("llama-3.1-8b", "H200", 1): (27_911, 17_744, 3_538, 3_902, 1_804),
    ("llama-3.3-70b", "H100-SXM", 2): (6_378, 4_205, 762, 898, 437),
    ("llama-3.3-70b", "H200", 1): (3_803, 2_909, 442, 566, 283),
}

TRTLLM_CELLS: tuple[Cell, ...] = tuple(
    Cell(model, gpu, tp, isl, osl, value, _REQUESTS[(isl, osl)])
    for (model, gpu, tp), values in _TABLE.items()
    for (isl, osl), value in zip(_SHAPES, values, strict=True)
)

# The same page's other shapes (long outputs): a hold-out for the 20 cells' fits.  Only H200's bw_efficiency
# looked at any of them (the H200/H100 ratio of the 8B 128/2048 and 500/2000 pairs, docs/plan.md).
_HOLDOUT_REQUESTS = {(128, 2048): 3000, (128, 4096): 1500, (500, 2000): 3000, (1000, 2000): 1500, (2048, 2048): 1500}
_HOLDOUT_TABLE: dict[tuple[str, str, int], tuple[int, ...]] = {
    ("llama-3.1-8b", "H100-SXM", 1): (22_714, 14_325, 17_660, 13_899, 9_305),
    ("llama-3.1-8b", "H200", 1): (26_221, 18_027, 20_770, 16_828, 12_194),
    ("llama-3.3-70b", "H100-SXM", 2): (6_651, 4_199, 5_222, 4_146, 3_082),
    ("llama-3.3-70b", "H200", 1): (4_336, 2_872, 3_666, 2_994, 2_003),
}

TRTLLM_HOLDOUT_CELLS: tuple[Cell, ...] = tuple(
    Cell(model, gpu, tp, isl, osl, value, _HOLDOUT_REQUESTS[(isl, osl)])
    for (model, gpu, tp), values in _HOLDOUT_TABLE.items()
    for (isl, osl), value in zip(_HOLDOUT_REQUESTS, values, strict=True)
)

SGLANG_SOURCE = ("datacrunch-research/h200-benchmarks sglang/outputs/llama_3_3_70b_offline_output.jsonl @ "
                 "c091ef530a525d2e788bc41c39a4450b09c9f2ad (commands: sglang/experiments/llama_3_3_70b_sglang.sh): "
                 "SGLang, meta-llama/Llama-3.3-70B-Instruct bf16, 4x H200 TP4, bench_serving --dataset-name random "
                 "at request rate inf, random_range_ratio 0 (lengths uniform in 1..len), output_throughput")

# That SGLang build's decode attention reads the KV cache far below the weights' streaming rate: with one
# bandwidth for both, its median ITL at 4 req/s (online file below) comes out 25 % short and its long-prompt
# offline rows 46 % / 29 % high, while prefill (bounded by the TTFTs) and small-batch decode (1-2 req/s) match.
# (Its KV pages are one token, so each layer's read per token is a 1 KiB gather at TP4; TensorRT-LLM's and
# vLLM's are 32- and 16-token blocks.)  Fitted on the online 4 req/s median ITL only, none of the five cells
# below: ``python benchmarks/sglang_replay.py --fit-kv``.
SGLANG_KV_BW_EFFICIENCY = 0.125

# Public measurements from another engine, never used to tune a constant: SGLang's default KV share
# at TP4 is 0.85 of memory; every row of that file is here (the repeated 4096/1024 run once).  They run
# with the engine's KV read efficiency above, fitted elsewhere.
OTHER_ENGINE_CELLS: tuple[Cell, ...] = tuple(
    Cell("llama-3.3-70b", "H200", 4, isl, osl, value, n, dtype="bf16", kv_dtype="bf16", gpu_mem_util=0.85,
         uniform_lengths=True, source=SGLANG_SOURCE, kv_bw_efficiency=SGLANG_KV_BW_EFFICIENCY)
    for isl, osl, value, n in (
        (1024, 1024, 4520.7, 3000),
        (1024, 512, 3492.3, 4000),
        (4096, 2048, 2051.3, 800),
        (4096, 1024, 1655.0, 1500),
        (256, 512, 6648.4, 6000),
    )
)

# The same SGLang runs' latency medians (same file, same rows), for where the time goes: median
# TTFT bounds the prefill rate (a request's first token follows every earlier prompt's prefill under
# FCFS), median ITL is the decode step plus any prefill run between two decode steps.
# (isl, osl) -> (median TTFT s, median ITL s, duration s)
SGLANG_OFFLINE_MEDIANS: dict[tuple[int, int], tuple[float, float, float]] = {
    (1024, 1024): (91.282, 0.15901, 341.72),
    (1024, 512): (114.572, 0.25885, 294.82),
    (4096, 2048): (61.606, 0.12048, 399.08),
    (4096, 1024): (186.502, 0.13397, 459.34),
    (256, 512): (33.224, 0.18757, 230.06),
}

SGLANG_ONLINE_SOURCE = ("datacrunch-research/h200-benchmarks sglang/outputs/llama_3_3_70b_online_output.jsonl @ "
                        "c091ef530a525d2e788bc41c39a4450b09c9f2ad: the same server, bench_serving random 1024/1024 "
                        "(uniform draws) at a Poisson request rate")

# Online rows of that file: (request rate /s, requests, median ITL s, median TTFT s, output tok/s).
# At 1 and 2 req/s about 8 and 17 requests run at once: the decode step is the weights streamed once.
# At 8 and 16 req/s the server is at or past saturation.
SGLANG_ONLINE_1024: tuple[tuple[float, int, float, float, float], ...] = (
    (1.0, 300, 0.013639, 0.08575, 537.4),
    (2.0, 600, 0.014830, 0.08756, 987.3),
    (4.0, 1200, 0.019420, 0.10606, 2047.9),
    (8.0, 2400, 0.070763, 0.19141, 3515.0),
    (16.0, 3200, 0.179121, 0.61425, 4288.0),
)
