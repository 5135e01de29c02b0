"""L2 replica choice: bands from scraped engine load plus the gateway's own in-flight counts,
ejection of failing replicas with re-probing, and a scale-out signal.  Pure and ``now``-driven.

Bands (per replica):

* **light** — KV use < ``light_kv`` and expected engine queue time < ``light_queue_s``:
  dispatch directly;
* **busy** — in between: still used, its score doubled (lower weight);
* **saturated** — KV use > ``saturated_kv`` or expected queue > ``saturated_queue_s``, or
  metrics older than ``stale_after_s``: avoided while any light or busy replica can take it.

Expected queue time = engine waiting count × the replica's observed service time / running.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

from turbogate.sched.load import ReplicaLoad


class Band(IntEnum):
    LIGHT = 0
    BUSY = 1
    SATURATED = 2


class Health(StrEnum):
    HEALTHY = "healthy"
    EJECTED = "ejected"


@dataclass(frozen=True, slots=True)
class PickerConfig:
    light_kv: float = 0.60
    saturated_kv: float = 0.85
    light_queue_s: float = 0.100
    saturated_queue_s: float = 0.500
    stale_after_s: float = 5.0
    eject_after_failures: int = 3
    probe_backoff_s: float = 1.0
    probe_backoff_max_s: float = 30.0
    scale_out_after_s: float = 30.0
    default_service_s: float = 1.0


@dataclass(slots=True, eq=False)
class Replica:
    """One engine replica as L2 sees it."""

    id: str
    pool: str
    max_concurrency: int
    scraped: bool = True
    in_flight: int = 0
    load: ReplicaLoad | None = None
    load_at: float = -math.inf
    health: Health = Health.HEALTHY
    failures: int = 0
    backoff_s: float = 0.0
    next_probe_at: float = 0.0
    ejections: int = 0
    served: int = 0
    service_s: float | None = None
    foreign: float = 0.0  # engine load not sent by this gateway, as of the last scrape


@dataclass(slots=True)
class _Pool:
    replicas: list[Replica] = field(default_factory=list)
    rotor: int = 0
    saturated_since: float | None = None


class Picker:
    """L2 for every pool of the gateway (or of a simulated fleet)."""

    def __init__(self, config: PickerConfig | None = None) -> None:
        self.config = config or PickerConfig()
        self._pools: dict[str, _Pool] = {}

    def add(self, replica: Replica) -> Replica:
        self._pools.setdefault(replica.pool, _Pool()).replicas.append(replica)
        return replica

    def pools(self) -> list[str]:
        return list(self._pools)

    def replicas(self, pool: str | None = None) -> list[Replica]:
        if pool is not None:
            return list(self._pools[pool].replicas)
        return [r for p in self._pools.values() for r in p.replicas]

    # ---- state -----------------------------------------------------------------------------
    def expected_queue_s(self, replica: Replica) -> float:
        load = replica.load
        if load is None or not load.waiting:
            return 0.0
        service = replica.service_s if replica.service_s is not None else self.config.default_service_s
        return load.waiting * service / max(load.running or 0.0, 1.0)

    def band(self, replica: Replica, now: float) -> Band:
        cfg = self.config
        if not replica.scraped:
            ratio = replica.in_flight / replica.max_concurrency
            return Band.LIGHT if ratio < cfg.light_kv else Band.BUSY if ratio <= cfg.saturated_kv else Band.SATURATED
        if replica.load is None or now - replica.load_at > cfg.stale_after_s:
            return Band.SATURATED
        kv = replica.load.kv_usage or 0.0
        queue = self.expected_queue_s(replica)
        if kv > cfg.saturated_kv or queue > cfg.saturated_queue_s:
            return Band.SATURATED
        if kv >= cfg.light_kv or queue >= cfg.light_queue_s:
            return Band.BUSY
        return Band.LIGHT

    def score(self, replica: Replica, now: float) -> float:
        """Lower is better: load relative to capacity, doubled when busy."""
        load = replica.load
        running = load.running if load is not None and load.running is not None else 0.0
        waiting = load.waiting if load is not None and load.waiting is not None else 0.0
        ratio = (max(float(replica.in_flight), running) + waiting) / replica.max_concurrency
        return ratio * (2.0 if self.band(replica, now) is Band.BUSY else 1.0)

    def replica_slots(self, replica: Replica, now: float) -> int:
        """Dispatch slots this replica offers L1: its concurrency less what other clients of
        the engine use; a saturated replica only keeps what it has; a stale one half."""
        if replica.health is not Health.HEALTHY:
            return 0
        cap = replica.max_concurrency
        if replica.scraped and (replica.load is None or now - replica.load_at > self.config.stale_after_s):
            return max(1, cap // 2)
        if replica.load is not None:
            cap = max(1, cap - math.ceil(replica.foreign))
        if self.band(replica, now) is Band.SATURATED:
            cap = min(cap, max(1, replica.in_flight))
        return cap

    def slots(self, pool: str, now: float) -> int:
        """Total dispatch slots of ``pool`` for L1's ``slots`` argument."""
        return sum(self.replica_slots(r, now) for r in self._pools[pool].replicas)

    # ---- choice ----------------------------------------------------------------------------
    def pick(self, pool: str, now: float, exclude: Collection[str] = ()) -> Replica | None:
        """The replica for the next request of ``pool``, or ``None`` if none can take one."""
        state = self._pools.get(pool)
        if state is None:
            return None
        best: Replica | None = None
        best_key = (Band.SATURATED + 1, math.inf)
        replicas = state.replicas
        n = len(replicas)
        state.rotor = (state.rotor + 1) % max(n, 1)
        for i in range(n):  # start at a rotating index so ties spread evenly
            r = replicas[(state.rotor + i) % n]
            if r.health is not Health.HEALTHY or r.in_flight >= r.max_concurrency or r.id in exclude:
                continue
            band = self.band(r, now)
            key = (Band.BUSY if band is Band.LIGHT else band, self.score(r, now))
            if key < best_key:
                best, best_key = r, key
        return best

    def on_dispatch(self, replica: Replica) -> None:
        replica.in_flight += 1

    def on_success(self, replica: Replica, latency_s: float) -> None:
        """A request finished well (any HTTP answer from the engine counts as alive)."""
        replica.in_flight = max(0, replica.in_flight - 1)
        replica.failures = 0
        replica.served += 1
        prev = replica.service_s
        replica.service_s = latency_s if prev is None else prev + 0.2 * (latency_s - prev)

    def on_failure(self, replica: Replica, now: float, *, hard: bool, dispatched: bool = True) -> None:
        """A request or scrape failed.  ``hard`` (connection refused/reset) ejects at once;
        soft failures eject after ``eject_after_failures`` in a row."""
        if dispatched:
            replica.in_flight = max(0, replica.in_flight - 1)
        replica.failures += 1
        if replica.health is Health.HEALTHY and (hard or replica.failures >= self.config.eject_after_failures):
            self._eject(replica, now)

    def on_release(self, replica: Replica) -> None:
        """A request ended without telling anything about the replica (client went away)."""
        replica.in_flight = max(0, replica.in_flight - 1)

    def _eject(self, replica: Replica, now: float) -> None:
        replica.health = Health.EJECTED
        replica.ejections += 1
        replica.backoff_s = self.config.probe_backoff_s
        replica.next_probe_at = now + replica.backoff_s
        replica.load = None

    def on_metrics(self, replica: Replica, load: ReplicaLoad, now: float) -> None:
        replica.load = load
        replica.load_at = now
        # Compare with our in-flight count *now*, at scrape time: later our count moves on while
        # the scraped one stands still, and the difference would look like someone else's load.
        replica.foreign = max(0.0, (load.running or 0.0) + (load.waiting or 0.0) - replica.in_flight)

    # ---- health ----------------------------------------------------------------------------
    def due_probes(self, now: float) -> list[Replica]:
        """Ejected replicas whose re-probe time has come; each is not returned again until its
        probe result is reported (or its backoff passes once more)."""
        due = [r for r in self.replicas() if r.health is Health.EJECTED and r.next_probe_at <= now]
        for r in due:
            r.next_probe_at = now + r.backoff_s
        return due

    def on_probe(self, replica: Replica, ok: bool, now: float) -> None:
        if ok:
            replica.health = Health.HEALTHY
            replica.failures = 0
            replica.load_at = -math.inf  # stale until the next scrape
            return
        replica.backoff_s = min(self.config.probe_backoff_max_s, max(replica.backoff_s, 1e-3) * 2.0)
        replica.next_probe_at = now + replica.backoff_s

    # ---- pool signals ----------------------------------------------------------------------
    def scale_out_desired(self, pool: str, now: float) -> bool:
        """True once no healthy replica of ``pool`` has been light or busy for
        ``scale_out_after_s`` (call it regularly: it also tracks the start of that spell)."""
        state = self._pools[pool]
        saturated = all(
            r.health is not Health.HEALTHY or self.band(r, now) is Band.SATURATED for r in state.replicas
        )
        if not saturated:
            state.saturated_since = None
            return False
        if state.saturated_since is None:
            state.saturated_since = now
        return now - state.saturated_since >= self.config.scale_out_after_s

    def describe(self, now: float) -> Iterable[dict[str, object]]:
        for r in self.replicas():
            yield {
                "id": r.id,
                "pool": r.pool,
                "health": r.health.value,
                "band": self.band(r, now).name.lower(),
                "score": round(self.score(r, now), 4),
                "in_flight": r.in_flight,
                "max_concurrency": r.max_concurrency,
                "slots": self.replica_slots(r, now),
                "served": r.served,
                "ejections": r.ejections,
                "metrics_age_s": None if r.load_at == -math.inf else round(now - r.load_at, 3),
                "running": r.load.running if r.load else None,
                "waiting": r.load.waiting if r.load else None,
                "kv_usage": r.load.kv_usage if r.load else None,
            }
