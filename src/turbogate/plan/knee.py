"""The planner's knee of a pool, for the knee guard (pure).

``plan capacity`` predicts, per replica, the lowest request rate at which the mean E2E latency
reaches ``knee_factor`` × its unloaded value (plan/latency.py).  A pool of ``replicas`` such
replicas behind the gateway has that many times the knee: the gateway spreads the load.
"""

from __future__ import annotations

from dataclasses import dataclass

from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.perf.default_workload import OUTPUT_TOKENS, PROMPT_TOKENS
from turbogate.plan.latency import DEFAULT_KNEE_FACTOR, latency_model


@dataclass(frozen=True, slots=True)
class PlannedPool:
    """A pool's hardware, model and request shape, as ``plan capacity`` takes them."""

    gpu: str
    model: str
    replicas: int
    tp: int = 1
    dtype: str = "bf16"
    kv_dtype: str = "auto"
    gpu_mem_util: float = 0.9
    prompt_tokens: int = PROMPT_TOKENS
    output_tokens: int = OUTPUT_TOKENS
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    knee_factor: float = DEFAULT_KNEE_FACTOR


def planned_knee(p: PlannedPool) -> tuple[float, str]:
    """The pool's knee (req/s, all replicas) and a line saying what it was computed for.
    ``ValueError`` / ``LookupError`` name an unknown GPU or model or a bad setting."""
    if p.replicas < 1:
        raise ValueError("replicas must be >= 1")
    dep = deployment(get_gpu(p.gpu), resolve_model(p.model), tp=p.tp, weight_dtype=p.dtype, kv_dtype=p.kv_dtype,
                     gpu_mem_util=p.gpu_mem_util)
    lm = latency_model(dep, p.prompt_tokens, p.output_tokens, p.max_num_seqs, p.max_num_batched_tokens)
    per_replica = lm.knee(p.knee_factor)
    detail = (f"plan: {p.replicas} × {p.gpu} {p.model} tp{p.tp}, {p.prompt_tokens}/{p.output_tokens} tokens, "
              f"max_num_seqs {p.max_num_seqs}: {per_replica:.3g} req/s per replica (E2E {p.knee_factor:g}× unloaded)")
    return per_replica * p.replicas, detail
