"""L2 replica choice: bands from scraped engine load plus the gateway's own in-flight counts,
an adaptive concurrency limit per replica, health (ejection, re-probing) and a scale-out
signal.  Pure and ``now``-driven.

Bands (per replica):

* **light** — KV use < ``light_kv`` and expected engine queue time < ``light_queue_s``;
* **busy** — in between: still used, its score doubled (lower weight);
* **saturated** — KV use > ``saturated_kv`` or expected queue > ``saturated_queue_s``, or
  metrics older than ``stale_after_s``: avoided while any light or busy replica can take it.

Expected queue time = engine waiting count × the replica's observed service time / running.

**Adaptive concurrency.**  How many requests a replica should hold is learned, not configured:
the queue — and with it the tiers' priority — must live in the gateway, not in the engine's
own FIFO.  At each scrape of an engine that reports its waiting count:

* a queue above ``queue_tolerance`` (default 0) → the limit drops to what the engine runs of
  ours (one scrape converges: 64 in flight, 48 of them waiting, gives 16), and that value
  becomes the slow-start threshold.  A small queue must be seen on two scrapes in a row: a
  request sent during an engine step shows as waiting until the step ends, and a limit that
  shrinks on such snapshots ratchets down;
* no queue, the limit reached since the last scrape (so it may be what holds us back), the
  engine seen running (nearly) that many at once, and KV use below ``saturated_kv`` → the limit
  grows: ×1.5 per scrape below the threshold (slow start), one slot every
  ``grow_every_scrapes`` above it (a rare probe), as TCP does.  Turbo avoids the probed slots
  (``pick(proven_only=True)``).

Overshoot is what hurts: a limit above what the engine runs puts requests in the engine's
FIFO, where a Turbo request waits behind Standard ones for a completion, and it erases the
holdback's headroom.  Hence no tolerance by default and slow probing above the threshold;
undershooting by a slot costs little.

``max_concurrency`` from the config is only an optional cap.  A replica without metrics
(``scraped=False``) keeps ``unscraped_limit`` (or its cap): nothing tells us its queue.

**Health.**  A refused connection ejects at once; soft failures (5xx answers, resets, a failed
scrape, a deadline hit while waiting for the first byte) eject after ``eject_after_failures``
in a row.  Ejected replicas are re-probed with doubling backoff.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Literal, NamedTuple

from turbogate.sched.load import ReplicaLoad


class Band(IntEnum):
    LIGHT = 0
    BUSY = 1
    SATURATED = 2


class Health(StrEnum):
    HEALTHY = "healthy"
    EJECTED = "ejected"


ScrapeFailureKind = Literal["connect", "status", "timeout", "parse"]


class ScrapeFailed(NamedTuple):
    """A scrape of ``/metrics`` that gave no load: the connection was refused (``connect``),
    the answer was not 200 (``status``), it did not come in time (``timeout``: the load goes
    stale, counted as saturated, but a slow /metrics under load is "busy", not "dead"), or it
    could not be parsed (``parse``)."""

    kind: ScrapeFailureKind


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
    initial_limit: int = 16
    min_limit: int = 1
    queue_tolerance: float = 0.0
    grow_every_scrapes: int = 5
    unscraped_limit: int = 64
    #: A first byte later than this after dispatch is a strike against the replica (the request
    #: still waits for it, up to its deadline): a hung engine is ejected long before a tier's
    #: deadline has passed on ``eject_after_failures`` requests.  A good answer clears strikes.
    slow_first_byte_s: float = 60.0


@dataclass(slots=True, eq=False)
class Replica:
    """One engine replica as L2 sees it."""

    id: str
    pool: str
    cap: int | None = None  # max_concurrency from the config: an optional upper bound
    scraped: bool = True
    limit: float = 8.0
    ssthresh: float = math.inf
    peak_in_flight: int = 0
    hold: int = 0  # scrapes to wait before the next additive probe
    last_waiting: float = 0.0  # the engine's waiting count at the previous scrape
    proven: float = 0.0  # most requests the engine was seen running at once since the last cut
    awaiting_first: int = 0  # ours dispatched and not yet answering (prefilling, for streams)
    in_flight: int = 0
    load: ReplicaLoad | None = None
    load_at: float = -math.inf
    health: Health = Health.HEALTHY
    failures: int = 0  # request-path failures in a row (a good answer resets them)
    probation: bool = False  # taken back by a probe, no good answer since
    scrape_failures: int = 0  # failed scrapes in a row (a good scrape resets them)
    backoff_s: float = 0.0
    next_probe_at: float = 0.0
    ejections: int = 0
    served: int = 0
    service_s: float | None = None
    foreign: float = 0.0  # engine load not sent by this gateway, as of the last scrape
    eject_reason: str = ""

    @property
    def max_concurrency(self) -> int:
        """The working limit now (learned, within the cap)."""
        return int(self.limit)


class HealthChange(NamedTuple):
    """A replica was ejected (``healthy`` False) or came back, and why."""

    replica: Replica
    healthy: bool
    reason: str


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
        self._by_id: dict[str, Replica] = {}
        #: Health changes since the caller last took them (``take_health_changes``).
        self._changes: list[HealthChange] = []

    def add(self, replica: Replica) -> Replica:
        cfg = self.config
        start = cfg.initial_limit if replica.scraped else cfg.unscraped_limit
        replica.limit = float(min(start, replica.cap) if replica.cap is not None else start)
        self._pools.setdefault(replica.pool, _Pool()).replicas.append(replica)
        self._by_id[replica.id] = replica
        return replica

    def get(self, replica_id: str) -> Replica:
        return self._by_id[replica_id]

    def pools(self) -> list[str]:
        return list(self._pools)

    def replicas(self, pool: str | None = None) -> list[Replica]:
        if pool is not None:
            return list(self._pools[pool].replicas)
        return [r for p in self._pools.values() for r in p.replicas]

    def take_health_changes(self) -> list[HealthChange]:
        changes, self._changes = self._changes, []
        return changes

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
            ratio = replica.in_flight / max(1.0, replica.limit)
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
        """Lower is better: own in-flight relative to the learned limit, doubled when busy."""
        ratio = replica.in_flight / max(1.0, replica.limit)
        return ratio * (2.0 if self.band(replica, now) is Band.BUSY else 1.0)

    def replica_slots(self, replica: Replica, now: float) -> int:
        """Dispatch slots this replica offers L1: its learned limit; a saturated replica only
        keeps what it has (at least one); a stale one half; an ejected one none."""
        if replica.health is not Health.HEALTHY:
            return 0
        cap = max(1, int(replica.limit))
        if replica.scraped and (replica.load is None or now - replica.load_at > self.config.stale_after_s):
            return max(1, cap // 2)
        if self.band(replica, now) is Band.SATURATED:
            cap = min(cap, max(1, replica.in_flight))
        return cap

    def slots(self, pool: str, now: float) -> int:
        """Total dispatch slots of ``pool`` for L1's ``slots`` argument."""
        return sum(self.replica_slots(r, now) for r in self._pools[pool].replicas)

    def proven_slots(self, pool: str, now: float) -> int:
        """The part of ``slots`` each engine has shown it runs at once, for the holdback: a
        replica still in slow start counts whole (the lower tiers' traffic is how its limit is
        found); past it, only what its engine was seen running since the last cut, so a probe
        of the limit never counts as Turbo's headroom."""
        total = 0
        for r in self._pools[pool].replicas:
            n = self.replica_slots(r, now)
            total += n if math.isinf(r.ssthresh) or r.proven < 1.0 else min(n, int(r.proven))
        return total

    def healthy(self, pool: str) -> int:
        return sum(1 for r in self._pools[pool].replicas if r.health is Health.HEALTHY)

    def next_probe_at(self, pool: str | None = None) -> float:
        """When the earliest ejected replica (of ``pool``) is re-probed (inf: none ejected)."""
        return min((r.next_probe_at for r in self.replicas(pool) if r.health is Health.EJECTED), default=math.inf)

    # ---- choice ----------------------------------------------------------------------------
    def pick(self, pool: str, now: float, exclude: Collection[str] = (), *, proven_only: bool = False
             ) -> Replica | None:
        """The replica for the next request of ``pool``, or ``None`` if none can take one.

        ``proven_only`` (Turbo): prefer a replica with no request failure since its last good
        answer (one timing out may be hung), then one whose in-flight count is below what its engine
        was seen running at once, so a probe of the limit (a slot the engine may not have) is
        taken by lower tiers and a Turbo request never waits in an engine's queue for it; and
        among those one with no request awaiting its first token (no prefill under way), so
        its own prefill does not share, or wait for, a longer engine step."""
        state = self._pools.get(pool)
        if state is None:
            return None
        best: Replica | None = None
        best_key: tuple[float, ...] = (True, Band.SATURATED + 1, math.inf)
        safe: Replica | None = None
        safe_key: tuple[float, ...] = (math.inf,)
        replicas = state.replicas
        n = len(replicas)
        state.rotor = (state.rotor + 1) % max(n, 1)
        for i in range(n):  # start at a rotating index so ties spread evenly
            r = replicas[(state.rotor + i) % n]
            if r.health is not Health.HEALTHY or r.in_flight >= int(r.limit) or r.id in exclude:
                continue
            band = self.band(r, now)
            # For Turbo, a replica with request failures in a row (a deadline hit: it may be hung)
            # is chosen only when no other can take the request.
            strike = proven_only and r.failures > 0
            key = (strike, Band.BUSY if band is Band.LIGHT else band, self.score(r, now))
            if key < best_key:
                best, best_key = r, key
            if proven_only and r.in_flight < int(r.proven):
                turbo_key = (strike, Band.SATURATED + 1 if r.awaiting_first else 0, key[1], key[2])
                if safe is None or turbo_key < safe_key:
                    safe, safe_key = r, turbo_key
        if safe is not None and (not safe_key[0] or best_key[0]):
            return safe
        return best

    def pick_plain(self, pool: str, how: str, exclude: Collection[str] = ()) -> Replica | None:
        """Baselines without limits or metrics: ``round-robin`` over healthy replicas, or
        ``least-outstanding`` (fewest in flight)."""
        state = self._pools.get(pool)
        if state is None:
            return None
        candidates = [r for r in state.replicas if r.health is Health.HEALTHY and r.id not in exclude]
        if not candidates:
            return None
        if how == "least-outstanding":
            state.rotor += 1
            n = len(candidates)
            return min((candidates[(state.rotor + i) % n] for i in range(n)), key=lambda r: r.in_flight)
        state.rotor = (state.rotor + 1) % len(candidates)
        return candidates[state.rotor]

    def on_dispatch(self, replica: Replica) -> None:
        replica.in_flight += 1
        if replica.in_flight > replica.peak_in_flight:
            replica.peak_in_flight = replica.in_flight

    # ---- outcomes --------------------------------------------------------------------------
    def on_response(self, replica: Replica, status: int, latency_s: float, now: float) -> None:
        """The replica answered (any HTTP status).  A 5xx from the engine counts as a soft
        failure (a storm of them ejects it); anything else proves it alive and feeds its
        service time."""
        replica.in_flight = max(0, replica.in_flight - 1)
        if status >= 500:
            self._fail(replica, now, hard=False, reason=f"answered HTTP {status}")
            return
        replica.failures = 0
        replica.probation = False
        replica.served += 1
        prev = replica.service_s
        replica.service_s = latency_s if prev is None else prev + 0.2 * (latency_s - prev)

    def on_failure(self, replica: Replica, now: float, *, hard: bool, dispatched: bool = True,
                   reason: str = "") -> None:
        """A request failed without an answer.  ``hard`` (connection refused) ejects at once;
        soft failures eject after ``eject_after_failures`` in a row."""
        if dispatched:
            replica.in_flight = max(0, replica.in_flight - 1)
        self._fail(replica, now, hard=hard, reason=reason or ("connection refused" if hard else "request failed"))

    def on_release(self, replica: Replica) -> None:
        """A request ended without telling anything about the replica (client went away)."""
        replica.in_flight = max(0, replica.in_flight - 1)

    def _fail(self, replica: Replica, now: float, *, hard: bool, reason: str) -> None:
        replica.failures += 1
        if replica.health is Health.HEALTHY and (hard or replica.failures >= self.config.eject_after_failures):
            why = reason if hard else f"{replica.failures} failures in a row, the last: {reason}"
            self._eject(replica, now, why)

    def _eject(self, replica: Replica, now: float, reason: str) -> None:
        replica.health = Health.EJECTED
        replica.ejections += 1
        # Ejected again while on probation (e.g. a hung engine whose /health still answers): the
        # backoff keeps doubling instead of starting over, so it costs ever fewer requests.
        base, top = self.config.probe_backoff_s, self.config.probe_backoff_max_s
        replica.backoff_s = min(top, max(replica.backoff_s, base) * 2) if replica.probation else base
        replica.probation = False
        replica.next_probe_at = now + replica.backoff_s
        replica.load = None
        replica.eject_reason = reason
        self._changes.append(HealthChange(replica, False, reason))

    # ---- scrapes -----------------------------------------------------------------------------
    def on_scrape(self, replica: Replica, result: ReplicaLoad | ScrapeFailed, now: float) -> None:
        """Classify one scrape: a load updates the bands and the adaptive limit; a refused
        connection ejects; a bad status or unparsable body is a soft failure; a timeout only
        lets the load go stale."""
        if isinstance(result, ScrapeFailed):
            if result.kind == "timeout":
                return
            what = {"connect": "metrics: connection refused", "status": "metrics: bad HTTP status",
                    "parse": "metrics: unparsable"}[result.kind]
            replica.scrape_failures += 1
            if replica.health is Health.HEALTHY and (
                    result.kind == "connect" or replica.scrape_failures >= self.config.eject_after_failures):
                self._eject(replica, now, what)
            return
        # A good scrape does not clear request failures: a hung engine may still serve /metrics.
        replica.scrape_failures = 0
        self.on_metrics(replica, result, now)

    def on_metrics(self, replica: Replica, load: ReplicaLoad, now: float) -> None:
        replica.load = load
        replica.load_at = now
        # Compare with our in-flight count *now*, at scrape time: later our count moves on while
        # the scraped one stands still, and the difference would look like someone else's load.
        replica.foreign = max(0.0, (load.running or 0.0) + (load.waiting or 0.0) - replica.in_flight)
        self._adapt(replica, load)

    def _adapt(self, replica: Replica, load: ReplicaLoad) -> None:
        cfg = self.config
        waiting = load.waiting
        if waiting is None:
            return
        # A request sent during an engine step shows as waiting until the step ends, so a small
        # queue proves nothing unless it is seen twice while the engine runs as many as it ever
        # has (a full engine); a large queue always counts.
        running = load.running or 0.0
        large = max(4.0, 0.25 * running)
        if waiting >= large:
            excess = waiting
        elif running >= replica.proven:
            excess = min(waiting, replica.last_waiting)
        else:
            excess = 0.0
        replica.last_waiting = waiting
        replica.proven = max(replica.proven, running)
        limit = replica.limit
        if excess > cfg.queue_tolerance:
            # What the engine runs of ours now: measured against our in-flight count at scrape
            # time, not the limit, which our in-flight may still exceed after a previous cut.
            limit = max(float(cfg.min_limit), min(limit, replica.in_flight - (excess - cfg.queue_tolerance)))
            # Slow start may climb back to what the engine showed it runs (others' load may go).
            replica.ssthresh = max(limit, load.running or 0.0)
            replica.hold = cfg.grow_every_scrapes
            replica.proven = min(replica.proven, limit)
        elif waiting <= cfg.queue_tolerance and (load.kv_usage or 0.0) < cfg.saturated_kv:
            # Grow only on the engine's own evidence that it runs what we send (its running
            # count, not our in-flight count: ours may still be on the wire).
            if limit < replica.ssthresh:
                # 0.8: below the holdback line (0.85 of the limit) lower tiers alone can prove it
                if replica.proven >= 0.8 * limit:
                    limit = min(limit * 1.5, replica.ssthresh)  # slow start (×1.5: a smaller overshoot)
            elif replica.proven < int(limit):
                pass  # it has not run the whole limit at once since the last cut: no reason to probe
            elif replica.hold <= 1:  # past the threshold, probe one more now and then
                limit += 1.0
                replica.hold = cfg.grow_every_scrapes
            else:
                replica.hold -= 1
        if replica.cap is not None:
            limit = min(limit, float(replica.cap))
        replica.limit = max(float(cfg.min_limit), limit)
        replica.peak_in_flight = replica.in_flight

    # ---- health ----------------------------------------------------------------------------
    def due_probes(self, now: float) -> list[Replica]:
        """Ejected replicas whose re-probe time has come; each is not returned again until its
        probe result is reported (or its backoff passes once more)."""
        due = [r for r in self.replicas() if r.health is Health.EJECTED and r.next_probe_at <= now]
        for r in due:
            r.next_probe_at = now + r.backoff_s
        return due

    def on_probe(self, replica: Replica, ok: bool, now: float) -> None:
        if replica.health is Health.HEALTHY:
            if not ok:  # a periodic check of a replica without metrics
                self._fail(replica, now, hard=False, reason="health check failed")
            return
        if ok:
            replica.health = Health.HEALTHY
            # Back on probation: /health proves the process up, not that it answers (a hung engine
            # still does), so its request failures stay one short of ejection until a good answer
            # clears them; Turbo avoids it meanwhile (pick).
            replica.failures = min(replica.failures, self.config.eject_after_failures - 1)
            replica.probation = True
            replica.scrape_failures = 0
            replica.load_at = -math.inf  # stale until the next scrape
            self._changes.append(HealthChange(replica, True, "health probe answered 200"))
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
                "eject_reason": r.eject_reason if r.health is Health.EJECTED else None,
                "band": self.band(r, now).name.lower(),
                "score": round(self.score(r, now), 4),
                "in_flight": r.in_flight,
                "limit": round(r.limit, 2),
                "max_concurrency": r.cap,
                "slots": self.replica_slots(r, now),
                "served": r.served,
                "ejections": r.ejections,
                "failures": r.failures,
                "metrics_age_s": None if r.load_at == -math.inf else round(now - r.load_at, 3),
                "running": r.load.running if r.load else None,
                "waiting": r.load.waiting if r.load else None,
                "kv_usage": r.load.kv_usage if r.load else None,
            }
