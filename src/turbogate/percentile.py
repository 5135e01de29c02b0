"""The project's one percentile: every ``pNN`` a run, a benchmark, the live display or the
gateway's core (sched/) takes follows this rule, so two reports of the same values agree.

The rank rule: sort the ``n`` values ascending and take the value at position
``q / 100 × (n − 1)`` (0-based), interpolating linearly between the two closest ranks —
Hyndman & Fan's type 7, the default of numpy's ``percentile``, R's ``quantile`` and Excel's
``PERCENTILE.INC``.  It is chosen because the run schema's figures (``results/stats.py``) were
always numpy's: this function gives them to the last bit, without numpy, so a benchmark's p95 and
a run folder's p95 of the same latencies are the same number.  ``p0`` is the minimum, ``p100``
the maximum, a single value is every percentile of itself, and an empty sequence has none
(``None``).

An infinite value (a censored sample: known only to exceed every measured one) ranks last; a
percentile that falls between it and a finite one, or among such values, is infinite, and the
caller says "unknown".  A percentile that lands exactly on a finite rank is that value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile_sorted(ordered: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0 ≤ q ≤ 100) of ``ordered``, already sorted ascending."""
    n = len(ordered)
    if n == 0:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"a percentile is between 0 and 100, not {q}")
    fraction = q / 100.0
    position = (n - 1) * fraction  # computed as numpy computes it: the same rounding, the same figure
    below = math.floor(position)
    lower_rank = min(max(below, 0), n - 1)
    upper_rank = min(max(below + 1, 0), n - 1)
    gamma = position - below
    lower, upper = float(ordered[lower_rank]), float(ordered[upper_rank])
    if gamma == 0.0 or lower_rank == upper_rank:
        return lower
    step = upper - lower
    if math.isinf(upper) or math.isinf(lower):
        return math.inf
    # numpy's interpolation, which measures from the nearer end (exact at both ends).
    return upper - step * (1.0 - gamma) if gamma >= 0.5 else lower + step * gamma


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0 ≤ q ≤ 100) of ``values`` in any order; ``None`` when empty."""
    return percentile_sorted(sorted(values), q)


def percentiles(values: Iterable[float], qs: Sequence[float]) -> list[float | None]:
    """Several percentiles of the same values, sorted once."""
    ordered = sorted(values)
    return [percentile_sorted(ordered, q) for q in qs]
