"""Seeded output lengths and the default max_tokens, shared by the emulator and the simulator."""

from __future__ import annotations

from collections import Counter

import pytest

from turbogate.engine import NATURAL_MAX_TOKENS, default_max_tokens, finish_reason, output_length


def test_ignore_eos_gives_exactly_max_tokens() -> None:
    assert {output_length(seed, 37, ignore_eos=True) for seed in range(50)} == {37}


def test_the_draw_is_a_pure_function_of_the_seed() -> None:
    assert [output_length(s, 100) for s in range(20)] == [output_length(s, 100) for s in range(20)]
    assert len({output_length(s, 100) for s in range(20)}) > 10


def test_the_draw_covers_its_range_evenly() -> None:
    counts = Counter(output_length(seed, 10, min_tokens=3) for seed in range(16_000))
    assert sorted(counts) == list(range(3, 11))
    assert all(1600 <= c <= 2400 for c in counts.values()), counts  # 2,000 each if uniform


def test_uncapped_requests_stop_at_the_natural_length() -> None:
    draws = [output_length(seed, 100_000, capped=False) for seed in range(2000)]
    assert max(draws) <= NATURAL_MAX_TOKENS and min(draws) >= 1
    assert max(draws) > NATURAL_MAX_TOKENS // 2


def test_min_tokens_above_max_tokens_gives_max_tokens() -> None:
    assert output_length(1, 5, min_tokens=50) == 5


def test_negative_and_huge_seeds_are_fine() -> None:
    for seed in (-1, -(2**70), 2**80):
        assert 1 <= output_length(seed, 9) <= 9
    with pytest.raises(ValueError):
        output_length(0, 0)


def test_default_max_tokens_is_the_rest_of_the_context() -> None:
    assert default_max_tokens(8192, 1000) == 7192
    with pytest.raises(ValueError):
        default_max_tokens(100, 100)


def test_finish_reason() -> None:
    assert finish_reason(10, 10) == "length"
    assert finish_reason(9, 10) == "stop"
