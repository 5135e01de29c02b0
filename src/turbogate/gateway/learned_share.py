"""Learned per-replica limits and each pool's service time through the store: written by every
process now and then, taken by a process that has not learnt its own yet (a restart, a worker or
gateway added).  What is taken and when is sched/learned.py's rule; this is the I/O."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from turbogate.sched.admission import Admission
from turbogate.sched.learned import adopt_pool, encode, encode_pool, pool_key
from turbogate.sched.picker import Picker
from turbogate.store.base import StoreUnavailable

log = logging.getLogger("turbogate.gateway")

class Store(Protocol):
    """The part of the store (store/base.py) this module uses."""

    async def learned_limits(self) -> dict[str, str]: ...
    async def put_learned_limits(self, limits: Mapping[str, str]) -> None: ...


class Core(Protocol):
    """The part of the flow (sched/flow.py) this module uses."""

    @property
    def picker(self) -> Picker: ...
    def admissions(self) -> Iterable[tuple[str, Admission]]: ...


#: How often the limits are written and, for replicas still in slow start, read back.
SHARE_INTERVAL_S = 2.0


async def take_learned(core: Core, store: Store) -> int:
    """Adopt the stored limits for replicas still in slow start, the stored first-token and
    output-token times where a replica has measured none, and a pool's stored service time where
    it has measured none (sched/learned.py); how many replicas and pools took something."""
    try:
        stored = await store.learned_limits()
    except StoreUnavailable:
        return 0
    wall = time.time()
    taken = 0
    picker = core.picker
    for replica in picker.replicas():
        text = stored.get(replica.id)
        if text is not None and picker.adopt_learned(replica, text, wall):
            taken += 1
    for pool, admission in core.admissions():
        text = stored.get(pool_key(pool))
        if text is not None and adopt_pool(admission.service, text, wall):
            taken += 1
    return taken


async def give_learned(core: Core, store: Store) -> None:
    wall = time.time()
    mine = {r.id: text for r in core.picker.replicas() if (text := encode(r, wall)) is not None}
    mine.update((pool_key(pool), text) for pool, admission in core.admissions()
                if (text := encode_pool(admission.service, wall)) is not None)
    if mine:
        with contextlib.suppress(StoreUnavailable):
            await store.put_learned_limits(mine)


async def share_loop(core: Core, store: Store, interval_s: float = SHARE_INTERVAL_S) -> None:
    """Forever: write what this process learnt, and take the store's where it has not yet."""
    while True:
        await asyncio.sleep(interval_s)
        with contextlib.suppress(Exception):  # a store hiccup must not end the loop
            await give_learned(core, store)
            await take_learned(core, store)


async def start_learned(core: Core, store: Store) -> None:
    """At start: what the processes before this one learnt (logged when taken)."""
    taken = await take_learned(core, store)
    if taken:
        log.info("took what %d replica(s) and pool(s) learnt from the store", taken)
