"""The one percentile (results/percentile.py): numpy's linear rule to the last bit on finite values,
its edges, and a censored (infinite) tail read as unknown."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from turbogate.results.percentile import percentile, percentile_sorted, percentiles

QS = (0, 1, 5, 25, 50, 75, 90, 95, 99, 99.9, 100)


@pytest.mark.parametrize("seed", range(8))
def test_it_is_numpys_linear_percentile_to_the_bit(seed: int) -> None:
    rng = random.Random(seed)
    for n in (1, 2, 3, 7, 20, 101, 1000):
        values = [rng.lognormvariate(-2.0, 1.0) for _ in range(n)]
        mine = percentiles(values, QS)
        assert mine == [float(v) for v in np.percentile(values, QS)], (n, seed)


def test_ties_integers_and_order() -> None:
    assert percentile([3, 1, 2, 2], 50) == 2.0
    assert percentile([10, 20], 25) == 12.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([4, 1], 0) == 1.0 and percentile([4, 1], 100) == 4.0


def test_no_values_no_percentile_and_q_is_checked() -> None:
    assert percentile([], 95) is None
    assert percentiles([], (50, 95)) == [None, None]
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 101)


def test_a_censored_tail_is_infinite_only_where_it_reaches() -> None:
    ordered = [1.0, 2.0, 3.0, math.inf]  # one request still running: above every measured one
    assert percentile_sorted(ordered, 50) == 2.5
    assert percentile_sorted(ordered, 100 * 2 / 3) == 3.0  # lands exactly on the last known rank
    assert percentile_sorted(ordered, 90) == math.inf
