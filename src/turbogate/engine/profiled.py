"""The stepped engine an engine profile describes, built in one place.

``plan burst``, the fidelity replay, ``sim`` and ``emulate`` all build their engine's settings here,
so the same profile runs the same scheduler in every instrument: its limits where the caller gives
none, and its scheduling terms (vLLM V0's prefill-only steps and multi-step runs) always.
"""

from __future__ import annotations

from turbogate.engine.types import EngineConfig, Policy
from turbogate.perf.profiles import EngineProfile, get_profile
from turbogate.perf.roofline import PerfFactors


def profile_config(profile: EngineProfile | str, max_num_seqs: int | None = None,
                   max_num_batched_tokens: int | None = None, *, policy: Policy = "fcfs",
                   num_gpu_blocks: int | None = None) -> EngineConfig:
    """The engine's settings under ``profile``: its scheduler limits unless given, its scheduling terms.

    A limit the caller gives is taken as given (``EngineConfig`` refuses a token budget below
    ``max_num_seqs``, as vLLM does); only the profile's own budget is raised to ``max_num_seqs``,
    so that a larger ``max_num_seqs`` alone stays valid.
    """
    prof = get_profile(profile) if isinstance(profile, str) else profile
    seqs = max_num_seqs or prof.max_num_seqs
    budget = max_num_batched_tokens or max(prof.max_num_batched_tokens, seqs)
    return EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=budget, policy=policy,
                        num_gpu_blocks=num_gpu_blocks, chunked_prefill=prof.chunked_prefill,
                        num_scheduler_steps=prof.num_scheduler_steps, output_lag_steps=prof.output_lag_steps,
                        reserve_outputs=prof.reserve_outputs, reserve_whole=prof.reserve_whole)


def first_token_wait_steps(factors: PerfFactors, config: EngineConfig, output_lag_steps: int) -> float:
    """Steps a driver holds a first token beyond what the engine reports, before the client sees it.

    ``factors.ttft_steps`` is the closed form's stand-in for multi-step scheduling; an engine that
    runs multi-step itself already waits for its run, so only the output processor's lag remains,
    and the engine applies ``config.output_lag_steps`` of it itself (``Engine`` reports the first
    token that much later): only a lag beyond the config's is left to the driver.
    """
    if config.num_scheduler_steps == 1:
        return factors.ttft_steps
    return float(max(0, output_lag_steps - config.output_lag_steps))
