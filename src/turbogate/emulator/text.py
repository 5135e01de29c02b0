"""Deterministic output text: one word from a small shipped list per output token.

How many tokens a request produces is drawn in ``turbogate.engine.lengths`` (shared with the simulator).
"""

from __future__ import annotations

import random
from importlib import resources

WORDS: tuple[str, ...] = tuple(resources.files(__package__).joinpath("words.txt").read_text().split())
# Each output token is " word" (a leading space, as BPE tokens usually carry).
TOKENS: tuple[str, ...] = tuple(" " + w for w in WORDS)


class TextSource:
    """Words drawn from one seed, so the same seed gives the same answer."""

    __slots__ = ("_rng",)

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def words(self, n: int) -> list[str]:
        return self._rng.choices(TOKENS, k=n)
