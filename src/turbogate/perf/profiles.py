"""Engine profiles: named factor sets for the engines and releases users run.

The roofline (``perf.roofline``) is the same for every engine; what differs is how close each
engine's kernels and scheduler get to the GPU's ceilings, and what it spends outside the GPU.
A profile is a :class:`PerfFactors` plus the scheduler limits that engine uses by default.  Each
was fitted on its own cells of the fitting half of ``perf/data/published_cells.yaml``
(``python benchmarks/engine_calibration.py --fit PROFILE``) and is checked on the hold-out half;
docs/plan.md lists every value with where it comes from.

``base`` is the model before profiles (every factor at its default, fitted on TensorRT-LLM's
performance overview): library callers that build a ``Deployment`` without factors get it.
The command lines (plan, sim, emulate) take ``--engine-profile`` and default to ``vllm-v1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from turbogate.errors import CatalogError
from turbogate.perf.roofline import Deployment, PerfFactors

DEFAULT_PROFILE = "vllm-v1"


@dataclass(frozen=True, slots=True)
class EngineProfile:
    name: str
    description: str
    factors: PerfFactors
    max_num_seqs: int  # the engine's default cap on running requests
    max_num_batched_tokens: int  # its default token budget per step (chunked prefill size)
    fitted_on: str  # which cells the fitted values come from
    chunked_prefill: bool = True  # False: a step that prefills holds no decodes (vLLM V0's default scheduler)
    num_scheduler_steps: int = 1  # vLLM V0's multi-step scheduling: decode steps planned at once
    output_lag_steps: int = 0  # steps a sampled token waits to reach the client (stepped engine, multi-step)
    reserve_outputs: bool = False  # SGLang's admission: only while every running request's output fits the KV
    reserve_whole: bool = False  # with reserve_outputs, TensorRT-LLM's: all of them at their final lengths at once


_COMMON_FIT = "the fitting half of perf/data/published_cells.yaml"

# Fitted values: ``python benchmarks/engine_calibration.py --fit PROFILE`` (closed form, fitting half only,
# coordinate descent from the previous values and 25 seeded random starts).  The two later terms were fitted
# alone, the rest kept: ``--fit trtllm --fit-only frontend_s,frontend_per_token_s`` and ``--fit vllm-v0|sglang
# --fit-only decode_allreduce_s``.  trtllm was refitted whole once NIM's whole table was in (docs/plan.md).
_VLLM_GPU_SIDE = {"bw_scale": 1.05, "mfu_scale": 0.8, "tp_allreduce_s": 0.000025, "tp_allreduce_growth_s": 0.00002,
                  "ridge_exponent": 2.0}  # fitted as vllm-v0 on both vLLM profiles' cells (same kernels)
# decode_allreduce_s stays None (the prefill's) for vLLM: searched on the fitting half, no other value lowered
# vllm-v0's loss.  SGLang's factors were refitted with the stepped engine's error in the loss as well as the
# closed form's (``--fit sglang --fit-loss both``, docs/plan.md), the engine running SGLang's scheduling, its
# decode all-reduce apart: its prefill runs eagerly (an all-reduce costs 100 µs + 20 µs per doubling beyond TP 2
# with the launches around it), its decode as CUDA graphs with a one-shot custom all-reduce (40 µs, flat in TP).

_PROFILES: tuple[EngineProfile, ...] = (
    EngineProfile(
        "base", "The model before engine profiles: TensorRT-LLM-calibrated defaults, no front end.",
        PerfFactors(), 2048, 8192, "TensorRT-LLM performance overview (perf.published.TRTLLM_CELLS)"),
    EngineProfile(
        "vllm-v1", "vLLM V1 (0.8 and later): API server in its own process, CUDA graphs, chunked prefill.",
        PerfFactors(frontend_s=0.005, **_VLLM_GPU_SIDE),
        1024, 8192, f"vllm-v0's fit on both vLLM profiles' cells of {_COMMON_FIT}, without V0's multi-step wait "
                    "(the fitting half holds no vLLM V1 TTFT to fit V1's front end on)"),
    EngineProfile(
        "vllm-v0", "vLLM 0.6 (V0 engine, --num-scheduler-steps 10, API server in the engine's process).",
        PerfFactors(frontend_s=0.005, ttft_steps=4.5, **_VLLM_GPU_SIDE),
        256, 4096, f"vllm-v0 and vllm-v1 cells of {_COMMON_FIT}; ttft_steps (10 − 1)/2 from the runs' "
                   "--num-scheduler-steps 10, max_num_batched_tokens = max_model_len 4096 (no chunked prefill)",
        chunked_prefill=False, num_scheduler_steps=10, output_lag_steps=1),
    EngineProfile(
        "sglang", "SGLang (0.3 – 0.4): prefill-first batches admitted with their outputs reserved, chunk 8192.",
        PerfFactors(frontend_s=0.0, frontend_per_token_s=0.00001, bw_scale=1.05, mfu_scale=0.9, kv_bw_efficiency=0.2,
                    tp_allreduce_s=0.0001, tp_allreduce_growth_s=0.00002, decode_allreduce_s=0.00004,
                    ridge_exponent=4.0),
        2048, 8192, f"sglang cells of {_COMMON_FIT}, with both instruments' error in the loss",
        chunked_prefill=False, reserve_outputs=True),
    EngineProfile(
        "trtllm", "TensorRT-LLM (trtllm-bench, NIM): in-process C++ runtime, custom all-reduce.",
        PerfFactors(frontend_s=0.005, frontend_per_token_s=0.000015, bw_scale=1.0, mfu_scale=1.3,
                    tp_allreduce_s=0.00003, tp_allreduce_growth_s=0.00003, ridge_exponent=8.0,
                    frontend_per_streamed_token_s=0.0002, busy_ttft_steps=5.0, per_seq_overhead_s=0.00005,
                    activation_reserve_bytes=3.0 * 2**30),
        2048, 8192, f"trtllm cells of {_COMMON_FIT} (NIM 1.8.0's whole 70B table, 55 cells); the front end's "
                    "fixed part is vLLM's 5 ms (freed, the fit takes the search's floor, 0, which no API server "
                    "reaches); admission as TensorRT-LLM's GUARANTEED_NO_EVICT",
        reserve_outputs=True, reserve_whole=True),
)

ENGINE_PROFILES: Mapping[str, EngineProfile] = {p.name: p for p in _PROFILES}


def get_profile(name: str) -> EngineProfile:
    try:
        return ENGINE_PROFILES[name.strip().lower()]
    except KeyError:
        raise CatalogError(f"unknown engine profile {name!r}; known: {', '.join(ENGINE_PROFILES)}") from None


def with_profile(dep: Deployment, profile: EngineProfile | str) -> Deployment:
    """``dep`` with the profile's factors (its GPU, model and memory settings unchanged)."""
    prof = get_profile(profile) if isinstance(profile, str) else profile
    return replace(dep, factors=prof.factors)
