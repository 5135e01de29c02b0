"""What a process tells the store of what it learnt, and what it takes back (pure: the store's
text in and out, the wall-clock time passed in).

Every replica's learned state and every pool's service time, as sched/learned.py writes and
adopts them one by one; gateway/learned_share.py moves these texts to and from the store, and the
simulator's restart (sim/restart.py, benchmarks/surge.py) hands them over in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from turbogate.sched.admission import Admission
from turbogate.sched.learned import adopt_pool, encode, encode_pool, pool_key
from turbogate.sched.picker import Picker


class Learner(Protocol):
    """The part of the flow (sched/flow.py) that learns: its picker and each pool's admission."""

    @property
    def picker(self) -> Picker: ...
    def admissions(self) -> Iterable[tuple[str, Admission]]: ...


def written(core: Learner, wall_now: float) -> dict[str, str]:
    """What ``core`` has to teach, by store key: each replica's state and each pool's service time."""
    mine = {r.id: text for r in core.picker.replicas() if (text := encode(r, wall_now)) is not None}
    mine.update((pool_key(pool), text) for pool, admission in core.admissions()
                if (text := encode_pool(admission.service, wall_now)) is not None)
    return mine


def take(core: Learner, stored: Mapping[str, str], wall_now: float) -> int:
    """Adopt what ``stored`` teaches where ``core`` has not learnt it yet (sched/learned.py's rules);
    how many replicas and pools took something."""
    taken = 0
    picker = core.picker
    for replica in picker.replicas():
        text = stored.get(replica.id)
        if text is not None and picker.adopt_learned(replica, text, wall_now):
            taken += 1
    for pool, admission in core.admissions():
        text = stored.get(pool_key(pool))
        if text is not None and adopt_pool(admission.service, text, wall_now):
            taken += 1
    return taken
