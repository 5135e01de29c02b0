"""Learned per-replica limits through the store: written by every process now and then, taken
by a process whose replicas are still in slow start (a restart, a worker or gateway added).
What is taken and when is sched/learned.py's rule; this is the I/O."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from turbogate.sched.learned import encode
from turbogate.sched.picker import Picker
from turbogate.store.base import StoreUnavailable

log = logging.getLogger("turbogate.gateway")

class Store(Protocol):
    """The part of the store (store/base.py) this module uses."""

    async def learned_limits(self) -> dict[str, str]: ...
    async def put_learned_limits(self, limits: Mapping[str, str]) -> None: ...


#: How often the limits are written and, for replicas still in slow start, read back.
SHARE_INTERVAL_S = 2.0


async def take_learned(picker: Picker, store: Store) -> int:
    """Adopt the stored limits for replicas still in slow start, and the stored first-token and
    output-token times where a replica has measured none (sched/learned.py); how many were taken."""
    try:
        stored = await store.learned_limits()
    except StoreUnavailable:
        return 0
    wall = time.time()
    taken = 0
    for replica in picker.replicas():
        text = stored.get(replica.id)
        if text is not None and picker.adopt_learned(replica, text, wall):
            taken += 1
    return taken


async def give_learned(picker: Picker, store: Store) -> None:
    wall = time.time()
    mine = {r.id: text for r in picker.replicas() if (text := encode(r, wall)) is not None}
    if mine:
        with contextlib.suppress(StoreUnavailable):
            await store.put_learned_limits(mine)


async def share_loop(picker: Picker, store: Store, interval_s: float = SHARE_INTERVAL_S) -> None:
    """Forever: write this process's learned limits, and take the store's where still cold."""
    while True:
        await asyncio.sleep(interval_s)
        with contextlib.suppress(Exception):  # a store hiccup must not end the loop
            await give_learned(picker, store)
            await take_learned(picker, store)


async def start_learned(picker: Picker, store: Store) -> None:
    """At start: what the processes before this one learnt (logged when taken)."""
    taken = await take_learned(picker, store)
    if taken:
        log.info("took the learned concurrency limits of %d replica(s) from the store", taken)
