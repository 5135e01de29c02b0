"""Closed-form saturation point of one engine replica.

At saturation an engine holds ``N`` sequences decoding at once, where ``N`` is bounded by
``max_num_seqs`` and by how many average-sized sequences fit in the KV cache.  Each sequence
needs ``output_tokens`` decode steps, so in steady state every step also carries the prefill
of ``N × prompt / output`` new prompt tokens (chunked prefill mixes them in).  The step time
then gives the saturation request rate ``N / (output_tokens × step_time)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from turbogate.perf.roofline import Deployment


@dataclass(frozen=True, slots=True)
class Saturation:
    batch: int  # concurrent sequences at saturation
    bound: str  # "max_num_seqs" or "kv_cache"
    step_time_s: float  # one engine step at that batch, prefill mixed in
    request_rate: float  # requests/s one replica sustains
    output_tokens_per_s: float
    prefill_tokens_per_step: float
    tpot_s: float  # time per output token at saturation


def avg_kv_tokens_per_seq(prompt_tokens: int, output_tokens: int, block_size: int) -> float:
    """Average KV footprint of a running sequence, rounded up to whole blocks."""
    mean_tokens = prompt_tokens + output_tokens / 2.0
    return math.ceil(mean_tokens / block_size) * block_size


def saturation(
    dep: Deployment,
    prompt_tokens: int,
    output_tokens: int,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
) -> Saturation:
    """The highest request rate one replica sustains for a fixed request shape."""
    if prompt_tokens < 1 or output_tokens < 1:
        raise ValueError("prompt_tokens and output_tokens must be >= 1")
    per_seq = avg_kv_tokens_per_seq(prompt_tokens, output_tokens, dep.block_size)
    kv_batch = int(dep.kv_capacity_tokens // per_seq)
    batch = max(1, min(max_num_seqs, kv_batch))
    bound = "max_num_seqs" if max_num_seqs <= kv_batch else "kv_cache"
    prefill_per_step = batch * prompt_tokens / output_tokens
    context = int(batch * (prompt_tokens + output_tokens / 2.0))
    tokens_per_step = prefill_per_step + batch
    # When the token budget cannot hold a step's share, the same work spreads over more steps.
    spread = max(1.0, tokens_per_step / max_num_batched_tokens)
    # The step's prefill belongs to batch / output_tokens new requests (at least one).
    prefill_seqs = max(1, round(batch / output_tokens / spread))
    step = dep.step_time(round(prefill_per_step / spread), batch, context, prefill_seqs=prefill_seqs)
    round_time = step * spread
    rate = batch / (output_tokens * round_time)
    return Saturation(
        batch=batch,
        bound=bound,
        step_time_s=round_time,
        request_rate=rate,
        output_tokens_per_s=rate * output_tokens,
        prefill_tokens_per_step=prefill_per_step,
        tpot_s=round_time,
    )
