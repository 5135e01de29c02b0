from __future__ import annotations

import pytest

from turbogate.engine import BlockManager


def test_allocate_and_free_round_trip() -> None:
    bm = BlockManager(10, 16)
    held: list[int] = []
    assert bm.allocate(4, held)
    assert held == [0, 1, 2, 3]
    assert bm.num_used == 4 and bm.num_free == 6
    assert bm.usage == pytest.approx(0.4)
    bm.free(held)
    assert held == [] and bm.num_free == 10


def test_allocation_refused_when_short_takes_nothing() -> None:
    bm = BlockManager(3, 16)
    held: list[int] = []
    assert not bm.allocate(4, held)
    assert held == [] and bm.num_free == 3


def test_double_free_is_an_error() -> None:
    bm = BlockManager(4, 16)
    held: list[int] = []
    bm.allocate(2, held)
    copy = list(held)
    bm.free(held)
    with pytest.raises(ValueError):
        bm.free(copy)


def test_blocks_for_rounds_up() -> None:
    bm = BlockManager(4, 16)
    assert [bm.blocks_for(n) for n in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_fragmentation_counts_free_blocks_outside_the_largest_run() -> None:
    bm = BlockManager(10, 16)
    a: list[int] = []
    b: list[int] = []
    c: list[int] = []
    bm.allocate(2, a)
    bm.allocate(2, b)
    bm.allocate(2, c)
    assert bm.fragmentation() == 0.0  # free: 6..9, one run
    bm.free(b)  # free: 2,3 and 6..9 -> largest run 4 of 6 free
    assert bm.largest_free_run() == 4
    assert bm.fragmentation() == pytest.approx(1 - 4 / 6)
    bm.free(a)
    bm.free(c)
    assert bm.fragmentation() == 0.0


def test_full_pool_has_no_fragmentation() -> None:
    bm = BlockManager(3, 16)
    held: list[int] = []
    bm.allocate(3, held)
    assert bm.fragmentation() == 0.0 and bm.largest_free_run() == 0
