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
    model: str  # turbogate catalog name
    gpu: str  # turbogate catalog name
    tp: int
    isl: int
    osl: int
    output_tok_s: float  # published Total Output Throughput
    requests: int
    dtype: str = "fp8"
    kv_dtype: str = "fp8"
    source: str = "trtllm"


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

# Public measurements from another engine, used to check the model and never to tune a constant.
OTHER_ENGINE_CELLS: tuple[Cell, ...] = ()
