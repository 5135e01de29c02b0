"""Closed-form saturation point of one engine replica.

At saturation an engine holds ``N`` sequences decoding at once, where ``N`` is bounded by
``max_num_seqs`` and by how many average-sized sequences fit in the KV cache.  Each sequence
needs ``output_tokens`` decode steps, so while ``N`` sequences produce ``output_tokens`` tokens
each (a *round*), ``N × prompt`` prompt tokens must be prefilled for their successors.

Real engines prefill in chunks beside the decodes: a round is ``N × prompt / chunk`` *mixed*
steps (the chunk plus every decode) and pure decode steps for the rest, so a compute-bound chunk
adds to the round instead of hiding under decode's memory time.  When the KV cache bounds ``N``,
freed KV admits prompts in bursts and the chunk fills the step's token budget
(``max_num_batched_tokens − N``); when ``max_num_seqs`` does, each finishing request admits one
prompt, so the chunk is a prompt (or the ``N / output`` prompts that arrive per step).  When even
all-mixed steps cannot prefill fast enough, fewer sequences decode per step (prefill-bound): each step then carries
``budget × output / (prompt + output)`` decodes and the rest prefill.
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


def peak_kv_tokens_per_seq(prompt_tokens: int, output_tokens: int, block_size: int) -> int:
    """KV a sequence holds by its last token, in whole blocks: what must stay free for it to finish."""
    return -(-(prompt_tokens + output_tokens) // block_size) * block_size


def _chunk_context(prompt_tokens: int, chunk: int) -> tuple[int, int]:
    """(requests per prefill chunk, tokens cached before the chunk's tokens, summed over them)."""
    if prompt_tokens >= chunk:
        pieces = -(-prompt_tokens // chunk)
        return 1, (pieces - 1) * chunk // 2  # one prompt per chunk, mean of 0, chunk, 2·chunk, ...
    return max(1, round(chunk / prompt_tokens)), 0


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
    per_seq = peak_kv_tokens_per_seq(prompt_tokens, output_tokens, dep.block_size)
    kv_batch = int(dep.kv_capacity_tokens // per_seq)
    batch = max(1, min(max_num_seqs, kv_batch))
    bound = "max_num_seqs" if max_num_seqs <= kv_batch else "kv_cache"
    ctx_seq = prompt_tokens + output_tokens / 2.0
    budget = max_num_batched_tokens
    chunk = budget - batch
    if bound == "max_num_seqs":
        # Each finishing request frees one slot for one prompt: batch / output prompts per step, so a
        # step's prefill is one prompt, or several where several arrive per step (cut at the budget).
        # When the KV cache binds instead, freed KV admits prompts in bursts that fill the budget.
        chunk = min(chunk, math.ceil(prompt_tokens * max(1.0, batch / output_tokens)))
    mixed = batch * prompt_tokens / chunk if chunk > 0 else math.inf  # mixed steps per round
    if mixed <= output_tokens:
        seqs, cached = _chunk_context(prompt_tokens, chunk)
        t_mixed = dep.step_time(chunk, batch, int(batch * ctx_seq), cached * seqs, prefill_seqs=seqs)
        t_decode = dep.decode_step_time(batch, int(batch * ctx_seq))
        round_time = mixed * t_mixed + (output_tokens - mixed) * t_decode
        rate = batch / round_time
        step = round_time / output_tokens
    else:  # prefill-bound: every step full, decodes in proportion to the work left per request
        decoders = max(1, round(budget * output_tokens / (prompt_tokens + output_tokens)))
        prefill = max(1, budget - decoders)
        seqs, cached = _chunk_context(prompt_tokens, prefill)
        step = dep.step_time(prefill, decoders, int(decoders * ctx_seq), cached * seqs, prefill_seqs=seqs)
        rate = decoders / (output_tokens * step)
    return Saturation(
        batch=batch,
        bound=bound,
        step_time_s=step,
        request_rate=rate,
        output_tokens_per_s=rate * output_tokens,
        prefill_tokens_per_step=rate * prompt_tokens * step,
        tpot_s=step,
    )
