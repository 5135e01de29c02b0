"""How many tokens a request produces, and its default ``max_tokens``: pure, seeded functions
that the emulator and the simulator share, so one seed gives one length in both.
"""

from __future__ import annotations

from turbogate.engine.types import FinishReason

NATURAL_MAX_TOKENS = 256  # longest answer the emulated model "wants" to give when nothing caps it

_MASK = (1 << 64) - 1


def _mix64(seed: int) -> int:
    """SplitMix64 finaliser: a well-spread 64-bit value from any int (cheaper than seeding a Random)."""
    z = (seed + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def default_max_tokens(max_model_len: int, prompt_tokens: int) -> int:
    """``max_tokens`` when the client sets none: the rest of the context, as vLLM does."""
    if prompt_tokens >= max_model_len:
        raise ValueError(f"a prompt of {prompt_tokens} tokens leaves no room in a context of {max_model_len}")
    return max_model_len - prompt_tokens


def output_length(seed: int, max_tokens: int, *, min_tokens: int = 0, ignore_eos: bool = False,
                  capped: bool = True) -> int:
    """Tokens to produce: ``max_tokens`` with ignore_eos, else where "EOS" falls, drawn from ``seed``.

    The draw is uniform between ``max(1, min_tokens)`` and ``max_tokens``; ``capped`` says whether
    the client set max_tokens: if not, the draw stops at NATURAL_MAX_TOKENS.
    """
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    if ignore_eos:
        return max_tokens
    upper = max_tokens if capped else min(max_tokens, NATURAL_MAX_TOKENS)
    lower = min(max(1, min_tokens), upper)
    return lower + ((_mix64(seed) * (upper - lower + 1)) >> 64)


def finish_reason(output_tokens: int, max_tokens: int) -> FinishReason:
    """"length" when the answer used all of ``max_tokens``, else "stop" (it hit EOS)."""
    return "length" if output_tokens >= max_tokens else "stop"
