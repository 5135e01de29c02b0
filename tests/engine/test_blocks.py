from __future__ import annotations

import random

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


def test_largest_free_run_matches_a_plain_scan_under_churn() -> None:
    rng = random.Random(5)
    for _ in range(200):
        bm = BlockManager(rng.randint(1, 200), 16)
        holders: list[list[int]] = [[] for _ in range(12)]
        for _ in range(40):
            held = rng.choice(holders)
            if rng.random() < 0.6:
                bm.allocate(rng.randint(0, 9), held)
            else:
                bm.free(held)
            taken = {b for h in holders for b in h}
            runs = bytes(b in taken for b in range(bm.num_blocks)).split(b"\x01")
            assert bm.largest_free_run() == max(len(r) for r in runs)


def test_allocate_each_gives_one_block_to_each_holder_in_queue_order() -> None:
    bm = BlockManager(8, 16)
    first: list[int] = []
    bm.allocate(3, first)
    holders: list[list[int]] = [[], [], []]
    bm.allocate_each(holders)
    assert holders == [[3], [4], [5]] and bm.num_free == 2
    bm.free(first)
    assert bm.allocate(4, first) and first == [6, 7, 2, 1], "returned blocks go to the back, tail first"
