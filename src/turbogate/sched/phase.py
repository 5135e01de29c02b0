"""Phase-aware replica choice (L2, pure): a prefill-heavy request goes where compute is free, a
decode-heavy one where memory bandwidth is.

A request's prefill is compute-bound (its prompt's FLOPs) and its decode bandwidth-bound (every
output token streams the weights and its KV cache).  A replica busy prefilling long prompts has
its tensor pipes busy and bandwidth to spare; one decoding many long answers the other way round.
DCGM measures both (``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``, ``DCGM_FI_PROF_DRAM_ACTIVE``; the
emulator exports them from its step model, ``engine/busy.py``), and ``sched/load.py`` reads them
into ``ReplicaLoad``.

The rule: a request's prefill share ``s`` is its prompt's part of its tokens (prompt ÷ (prompt +
expected output)); a replica's pressure for it is ``s × tensor + (1 − s) × dram``; the picker's
score (in-flight over the learned limit, doubled when busy) gains ``phase_weight × pressure``.
The bands still come first, and the in-flight part keeps growing with each dispatch between
two scrapes, so one replica that looked free at the last scrape does not take every request
until the next.  A replica whose gauges are missing counts as half busy on both.

Off by default (``phase_weight`` 0): docs/gateway.md says where it measured a win.
"""

from __future__ import annotations

from collections.abc import Callable

from turbogate.sched.load import ReplicaLoad
from turbogate.sched.replica import Band, Replica

#: What a replica without DCGM gauges counts as (neither free nor busy).
UNKNOWN_ACTIVE = 0.5

Scorer = Callable[[Replica, Band], float]


def prefill_share(prompt_tokens: float, output_tokens: float) -> float:
    """The prompt's share of a request's tokens (0: all decode, 1: all prefill)."""
    total = prompt_tokens + output_tokens
    return prompt_tokens / total if total > 0 else 0.0


def pressure(load: ReplicaLoad | None, share: float) -> float:
    """How busy ``load``'s GPU is in the resource a request with prefill share ``share`` needs, 0..1."""
    tensor = dram = UNKNOWN_ACTIVE
    if load is not None:
        if load.tensor_active is not None:
            tensor = load.tensor_active
        if load.dram_active is not None:
            dram = load.dram_active
    return share * tensor + (1.0 - share) * dram


def phase_scorer(base: Scorer, share: float, weight: float) -> Scorer:
    """The picker's ``base`` score plus ``weight`` × the replica's :func:`pressure` for a
    request of prefill share ``share``."""

    def score(replica: Replica, band: Band) -> float:
        return base(replica, band) + weight * pressure(replica.load, share)

    return score
