"""Learned per-replica limits and each pool's service time through the store: written by every
process now and then, taken by a process that has not learnt its own yet (a restart, a worker or
gateway added).  What is written and taken is sched/learned_share.py's rule; this is the I/O."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from turbogate.sched.learned_share import Learner, take, written
from turbogate.store.base import StoreUnavailable

log = logging.getLogger("turbogate.gateway")


class Store(Protocol):
    """The part of the store (store/base.py) this module uses."""

    async def learned_limits(self) -> dict[str, str]: ...
    async def put_learned_limits(self, limits: Mapping[str, str]) -> None: ...


#: How often the limits are written and, for replicas still in slow start, read back.
SHARE_INTERVAL_S = 2.0


async def take_learned(core: Learner, store: Store) -> int:
    """Adopt what the store holds where this process has not learnt it yet (sched/learned_share.py);
    how many replicas and pools took something."""
    try:
        stored = await store.learned_limits()
    except StoreUnavailable:
        return 0
    return take(core, stored, time.time())


async def give_learned(core: Learner, store: Store) -> None:
    mine = written(core, time.time())
    if mine:
        with contextlib.suppress(StoreUnavailable):
            await store.put_learned_limits(mine)


async def share_loop(core: Learner, store: Store, interval_s: float = SHARE_INTERVAL_S) -> None:
    """Forever: write what this process learnt, and take the store's where it has not yet."""
    while True:
        await asyncio.sleep(interval_s)
        with contextlib.suppress(Exception):  # a store hiccup must not end the loop
            await give_learned(core, store)
            await take_learned(core, store)


async def start_learned(core: Learner, store: Store) -> None:
    """At start: what the processes before this one learnt (logged when taken)."""
    taken = await take_learned(core, store)
    if taken:
        log.info("took what %d replica(s) and pool(s) learnt from the store", taken)
