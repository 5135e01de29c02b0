"""The one default workload of ``plan``, ``sim``, ``bench`` and ``demo`` (pure constants).

Every command that offers or predicts load starts from the same request shape, so a figure from
one tool can be set beside a figure from another without translating workloads first
(docs/bench.md, "The default workload").  Fixed lengths (no spread): the closed form takes a
length, not a distribution, and ``ignore_eos`` makes the engines produce exactly this many tokens.
"""

from __future__ import annotations

PROMPT_TOKENS = 256
OUTPUT_TOKENS = 128


def length_spec(tokens: int) -> str:
    """A fixed length as the bench's ``mean:std:min:max`` option text."""
    return f"{tokens}:0:{tokens}:{tokens}"


PROMPT_SPEC = length_spec(PROMPT_TOKENS)
OUTPUT_SPEC = length_spec(OUTPUT_TOKENS)
