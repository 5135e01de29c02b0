"""Deterministic output text: one word from a small shipped list per output token."""

from __future__ import annotations

import random
from importlib import resources

WORDS: tuple[str, ...] = tuple(resources.files(__package__).joinpath("words.txt").read_text().split())
# Each output token is " word" (a leading space, as BPE tokens usually carry).
TOKENS: tuple[str, ...] = tuple(" " + w for w in WORDS)

NATURAL_MAX_TOKENS = 256  # longest answer the emulated model "wants" to give when nothing caps it


class TextSource:
    """Words and an answer length drawn from one seed, so the same seed gives the same answer."""

    __slots__ = ("_rng",)

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def output_length(self, max_tokens: int, min_tokens: int, ignore_eos: bool, capped: bool) -> int:
        """Tokens to produce: ``max_tokens`` with ignore_eos, else where "EOS" falls.

        capped: whether the client set max_tokens; if not, the draw stops at NATURAL_MAX_TOKENS.
        """
        if ignore_eos:
            return max_tokens
        upper = max_tokens if capped else min(max_tokens, NATURAL_MAX_TOKENS)
        lower = min(max(1, min_tokens), upper)
        return self._rng.randint(lower, upper)

    def words(self, n: int) -> list[str]:
        return self._rng.choices(TOKENS, k=n)
