"""L2's books: the replicas of each pool, what each offers (its band, score and dispatch
slots), and for large pools running sums of those slots and a list of the replicas with room,
so that counting and choosing cost the same for 8 replicas and for 1,000.  Pure and
``now``-driven; ``Picker`` (sched/picker.py) chooses among them.

Bands (per replica):

* **light** — KV use < ``light_kv`` and expected engine queue time < ``light_queue_s``;
* **busy** — in between: still used, its score doubled (lower weight);
* **saturated** — KV use > ``saturated_kv`` or expected queue > ``saturated_queue_s``, or
  metrics older than ``stale_after_s``: avoided while any light or busy replica can take it.

Expected queue time = engine waiting count × the replica's observed service time / running.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from turbogate.sched.concurrency import start_limit
from turbogate.sched.load import ReplicaLoad
from turbogate.sched.replica import Band, Health, PickerConfig, Replica

# Read several times per replica per pick: module names, not lookups through the enum class.
_HEALTHY = Health.HEALTHY
_LIGHT, _BUSY, _SATURATED = Band.LIGHT, Band.BUSY, Band.SATURATED

#: Pools up to this size are scanned whole on every choice (exact); larger ones keep running
#: sums and a list of the replicas with room (``Picker`` samples among them).
SCAN_MAX = 8


@dataclass(slots=True)
class PoolState:
    replicas: list[Replica] = field(default_factory=list)
    rotor: int = 0
    saturated_since: float | None = None
    slots: int = 0
    proven: int = 0
    learning: int = 0  # replicas still in slow start (scraped ones: the others have no limit to learn)
    room: list[Replica] = field(default_factory=list)
    stale_at: float = math.inf  # the earliest time a counted replica's metrics go stale
    indexed: bool = False  # len(replicas) > SCAN_MAX: it keeps running sums and a room list
    held_share: float = 1.0  # the lowest holdback line that last kept a queued tier waiting (1: none)
    held_at: float = -math.inf  # when it last did


#: The KV use a nearly full replica is filled to by the requests its free cache is taken to hold.
KV_FILL = 0.95


def kv_room(load: ReplicaLoad) -> int:
    """Requests of its running ones' average size that a replica's free KV cache holds up to
    ``KV_FILL``, as of its last scrape.

    Past ``saturated_kv`` a replica offers what it held at that scrape and this: with no slot
    beyond what it held, every Turbo request waited in the gateway for seconds while a cohort
    of long requests decoded (4 × A10G, 512-token prompts: 3–6 s).  The lower tiers' lines stop
    below it, so it is Turbo's."""
    kv, running = load.kv_usage or 0.0, load.running
    if not running or kv <= 0.0 or kv >= KV_FILL:
        return 0
    return int((KV_FILL - kv) * running / kv)


class ReplicaBook:
    """The replicas of every pool and what each offers L1 and L2."""

    def __init__(self, config: PickerConfig | None = None) -> None:
        self.config = config or PickerConfig()
        self._pools: dict[str, PoolState] = {}
        self._by_id: dict[str, Replica] = {}
        self._now = 0.0  # the latest time any call told us (for updates that carry none)

    def add(self, replica: Replica) -> Replica:
        start_limit(replica, self.config)
        pool = self._pools.setdefault(replica.pool, PoolState())
        pool.replicas.append(replica)
        pool.indexed = len(pool.replicas) > SCAN_MAX
        self._by_id[replica.id] = replica
        self._count_learning(pool, replica)
        if pool.indexed:
            if len(pool.replicas) == SCAN_MAX + 1:  # it just grew past the scan size: index it all
                for r in pool.replicas:
                    self._refresh(r, self._now)
            else:
                self._refresh(replica, self._now)
        return replica

    def get(self, replica_id: str) -> Replica:
        return self._by_id[replica_id]

    def pools(self) -> list[str]:
        return list(self._pools)

    def replicas(self, pool: str | None = None) -> list[Replica]:
        if pool is not None:
            return list(self._pools[pool].replicas)
        return [r for p in self._pools.values() for r in p.replicas]

    def expected_queue_s(self, replica: Replica) -> float:
        load = replica.load
        if load is None or not load.waiting:
            return 0.0
        service = replica.service_s if replica.service_s is not None else self.config.default_service_s
        return load.waiting * service / max(load.running or 0.0, 1.0)

    def band(self, replica: Replica, now: float) -> Band:
        cfg = self.config
        if not replica.scraped:
            ratio = replica.in_flight / max(1.0, replica.limit)
            return _LIGHT if ratio < cfg.light_kv else _BUSY if ratio <= cfg.saturated_kv else _SATURATED
        if replica.load is None or now - replica.load_at > cfg.stale_after_s:
            return _SATURATED
        load = replica.load
        kv = load.kv_usage or 0.0
        queue = self.expected_queue_s(replica)
        if kv > cfg.saturated_kv or queue > cfg.saturated_queue_s:
            return _SATURATED
        if kv >= cfg.light_kv or queue >= cfg.light_queue_s:
            return _BUSY
        return _LIGHT

    def score(self, replica: Replica, now: float) -> float:
        """Lower is better: own in-flight relative to the learned limit, doubled when busy."""
        return self._score(replica, self.band(replica, now))

    @staticmethod
    def _score(replica: Replica, band: Band) -> float:
        ratio = replica.in_flight / (replica.limit if replica.limit > 1.0 else 1.0)
        return ratio * 2.0 if band is _BUSY else ratio

    def replica_slots(self, replica: Replica, now: float) -> int:
        """Dispatch slots this replica offers L1: its learned limit; one whose KV cache is
        nearly full, what it held at its last scrape and what the rest of its cache holds
        (``kv_room``; at least one); a stale one half; an ejected one none.  A queue in the
        engine is the limit's business (``sched/concurrency.py`` cuts it): shrinking slots to the
        in-flight count on a queue seen at the last scrape would shrink them further with every
        completion until the next scrape."""
        if replica.health is not _HEALTHY:
            return 0
        cap = max(1, int(replica.limit))
        if replica.scraped and (replica.load is None or now - replica.load_at > self.config.stale_after_s):
            return max(1, cap // 2)
        load = replica.load
        if replica.scraped and load is not None and (load.kv_usage or 0.0) > self.config.saturated_kv:
            cap = min(cap, max(1, replica.scrape_in_flight + kv_room(load)))
        return cap

    @staticmethod
    def _proven_part(replica: Replica, slots: int) -> int:
        """The part of a replica's ``slots`` its engine has shown it runs."""
        if math.isinf(replica.ssthresh) or replica.proven < 1.0:
            return slots
        return min(slots, int(replica.proven))

    def slots(self, pool: str, now: float) -> int:
        """Total dispatch slots of ``pool`` for L1's ``slots`` argument."""
        return self.slot_counts(pool, now)[0]

    def proven_slots(self, pool: str, now: float) -> int:
        """The part of ``slots`` each engine has shown it runs at once, for the holdback: a
        replica still in slow start counts whole (the lower tiers' traffic is how its limit is
        found); past it, only what its engine was seen running since the last cut, so a probe
        of the limit never counts as Turbo's headroom."""
        return self.slot_counts(pool, now)[1]

    def slot_counts(self, pool: str, now: float) -> tuple[int, int]:
        """``slots`` and ``proven_slots`` of ``pool`` in one pass (the flow needs both on every
        dispatch)."""
        state = self._pools[pool]
        if not state.indexed:
            total = proven = 0
            for r in state.replicas:
                n = self.replica_slots(r, now)
                total += n
                proven += self._proven_part(r, n)
            return total, proven
        self._catch_up(state, now)
        return state.slots, state.proven

    def _catch_up(self, state: PoolState, now: float) -> None:
        self._now = max(self._now, now)
        if now > state.stale_at:  # someone's metrics went stale since: count everyone again
            state.stale_at = math.inf
            for r in state.replicas:
                self._refresh(r, now)

    def note_held(self, pool: str, share: float, now: float) -> None:
        """L1 kept a queued tier waiting at its holdback line of ``share`` of the pool's slots
        while a replica was still in slow start (sched/flow_pump.py)."""
        state = self._pools[pool]
        state.held_share = share if now > state.held_at else min(share, state.held_share)
        state.held_at = now

    def learning(self, pool: str) -> bool:
        """Whether a replica of ``pool`` is still in slow start (its limit not learnt yet)."""
        return self._pools[pool].learning > 0

    @staticmethod
    def _count_learning(state: PoolState, replica: Replica) -> None:
        learning = replica.scraped and math.isinf(replica.ssthresh)
        if learning is not replica.counted_learning:
            state.learning += 1 if learning else -1
            replica.counted_learning = learning

    def _refresh(self, replica: Replica, now: float | None = None) -> None:
        """Recount ``replica`` in its pool's ``learning`` count, and in its running sums and room
        list (large pools only)."""
        state = self._pools[replica.pool]
        self._count_learning(state, replica)
        if not state.indexed:
            return
        t = self._now if now is None else now
        n = self.replica_slots(replica, t)
        proven = self._proven_part(replica, n)
        state.slots += n - replica.counted_slots
        state.proven += proven - replica.counted_proven
        replica.counted_slots, replica.counted_proven = n, proven
        if replica.scraped and replica.load is not None and replica.health is _HEALTHY:
            state.stale_at = min(state.stale_at, replica.load_at + self.config.stale_after_s)
        room = replica.health is _HEALTHY and replica.in_flight < int(replica.limit)
        if room and replica.room_index < 0:
            replica.room_index = len(state.room)
            state.room.append(replica)
        elif not room and replica.room_index >= 0:
            last = state.room.pop()
            if last is not replica:
                state.room[replica.room_index] = last
                last.room_index = replica.room_index
            replica.room_index = -1

    def healthy(self, pool: str) -> int:
        return sum(1 for r in self._pools[pool].replicas if r.health is _HEALTHY)
