"""vLLM's benchmark definitions of per-request latency, as pure functions.

They follow ``vllm/benchmarks`` (``benchmark_serving``) so figures compare with it:

- TTFT: send to the first streamed chunk that carries ``choices``;
- ITL: one value per gap between consecutive chunks with ``choices`` (a chunk may hold several
  tokens; the gap is not divided);
- E2E: send to the last chunk received (the ``usage`` chunk included);
- TPOT: (E2E − TTFT) / (output tokens − 1), defined only with more than one output token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StreamTiming:
    ttft_s: float | None
    itl_s: tuple[float, ...]
    e2e_s: float | None


def stream_timing(sent: float, chunks: Sequence[tuple[float, bool]]) -> StreamTiming:
    """Timing of one streamed response from ``(arrival time, has choices)`` per chunk."""
    ttft: float | None = None
    itl: list[float] = []
    last = sent
    for t, has_choices in chunks:
        if has_choices:
            if ttft is None:
                ttft = t - sent
            else:
                itl.append(t - last)
        last = t
    return StreamTiming(ttft_s=ttft, itl_s=tuple(itl), e2e_s=(last - sent) if chunks else None)


def tpot(e2e_s: float | None, ttft_s: float | None, output_tokens: int | None) -> float | None:
    """Time per output token after the first; None when undefined (≤ 1 token or missing data)."""
    if e2e_s is None or ttft_s is None or output_tokens is None or output_tokens <= 1:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)
