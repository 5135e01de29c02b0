"""L2 replica choice: bands from scraped engine load plus the gateway's own in-flight counts,
an adaptive concurrency limit per replica, health (ejection, re-probing) and a scale-out
signal.  Pure and ``now``-driven.

Bands (per replica):

* **light** — KV use < ``light_kv`` and expected engine queue time < ``light_queue_s``;
* **busy** — in between: still used, its score doubled (lower weight);
* **saturated** — KV use > ``saturated_kv`` or expected queue > ``saturated_queue_s``, or
  metrics older than ``stale_after_s``: avoided while any light or busy replica can take it.

Expected queue time = engine waiting count × the replica's observed service time / running.

The concurrency limit each replica offers is learned from its engine (``sched/concurrency.py``).

**Health.**  A refused connection ejects at once; soft failures (5xx answers, resets, a failed
scrape, a deadline hit while waiting for the first byte) eject after ``eject_after_failures``
in a row.  Ejected replicas are re-probed with doubling backoff.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from turbogate.sched.concurrency import LOWER_TIERS_BAR, adapt_limit, start_limit
from turbogate.sched.load import ReplicaLoad
from turbogate.sched.phase import Scorer, phase_scorer
from turbogate.sched.replica import (
    SILENT_ENGINE_SCRAPES,
    Band,
    Health,
    HealthChange,
    MetricsDoubt,
    PickerConfig,
    Replica,
    ScrapeFailed,
)

__all__ = ["Band", "Health", "HealthChange", "MetricsDoubt", "Picker", "PickerConfig", "Replica", "ScrapeFailed"]

T = TypeVar("T")


def _taken(items: list[T]) -> tuple[Sequence[T], list[T]]:
    """``items`` handed over and the list to keep collecting in; nothing pending (the usual case,
    after every event) allocates no new list."""
    return ((), items) if not items else (items, [])


#: Scrapes without growth after which a slow start counts as stalled (``Picker._turbo_room``).
SLOW_START_STALLED_SCRAPES = 2


# Enum members as module names: on Python 3.11 reading a member through its class costs a
# metaclass lookup (~4x a global), and these are read several times per replica per pick.
_HEALTHY, _EJECTED = Health.HEALTHY, Health.EJECTED
_LIGHT, _BUSY, _SATURATED = Band.LIGHT, Band.BUSY, Band.SATURATED
_NO_KEY = (_SATURATED + 1, math.inf)  # worse than any replica's (band, score)
_PREFILLING = _SATURATED + 1  # Turbo's key: a replica awaiting a first token ranks below every band

#: Pools up to this size are scanned whole on every choice (exact); larger ones keep running
#: sums and a list of the replicas with room, and choose among a few sampled from it (the
#: "power of k choices"), so a decision costs the same for 8 replicas and for 1,000.
SCAN_MAX = 8
SAMPLE = 4


@dataclass(slots=True)
class _Pool:
    replicas: list[Replica] = field(default_factory=list)
    rotor: int = 0
    saturated_since: float | None = None
    slots: int = 0
    proven: int = 0
    room: list[Replica] = field(default_factory=list)
    stale_at: float = math.inf  # the earliest time a counted replica's metrics go stale
    indexed: bool = False  # len(replicas) > SCAN_MAX, kept by Picker.add (read on every pick and count)


class Picker:
    """L2 for every pool of the gateway (or of a simulated fleet)."""

    def __init__(self, config: PickerConfig | None = None) -> None:
        self.config = config or PickerConfig()
        self._pools: dict[str, _Pool] = {}
        self._by_id: dict[str, Replica] = {}
        #: Health changes since the caller last took them (``take_health_changes``).
        self._changes: list[HealthChange] = []
        self._doubts: list[MetricsDoubt] = []
        self._now = 0.0  # the latest time any call told us (for updates that carry none)
        self._sample_seed = 0x9E3779B9

    def add(self, replica: Replica) -> Replica:
        start_limit(replica, self.config)
        pool = self._pools.setdefault(replica.pool, _Pool())
        pool.replicas.append(replica)
        pool.indexed = len(pool.replicas) > SCAN_MAX
        self._by_id[replica.id] = replica
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

    def take_metrics_doubts(self) -> Sequence[MetricsDoubt]:
        """Replicas whose metrics cannot steer their limit, since the last call (rare)."""
        doubts, self._doubts = _taken(self._doubts)
        return doubts

    def take_health_changes(self) -> Sequence[HealthChange]:
        changes = self._changes
        if not changes:  # the usual case, after every event: nothing to hand over, nothing to allocate
            return ()
        self._changes = []
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
            return _LIGHT if ratio < cfg.light_kv else _BUSY if ratio <= cfg.saturated_kv else _SATURATED
        if replica.load is None or now - replica.load_at > cfg.stale_after_s:
            return _SATURATED
        load = replica.load
        kv = load.kv_usage or 0.0
        queue = self.expected_queue_s(replica) if load.waiting else 0.0  # (the common case, without the call)
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
        full only keeps what it has (at least one); a stale one half; an ejected one none.  A
        queue in the engine is the limit's business (``sched/concurrency.py`` cuts it): shrinking
        slots to the in-flight count on a queue seen at the last scrape would shrink them further
        with every completion until the next scrape."""
        if replica.health is not _HEALTHY:
            return 0
        cap = max(1, int(replica.limit))
        if replica.scraped and (replica.load is None or now - replica.load_at > self.config.stale_after_s):
            return max(1, cap // 2)
        load = replica.load
        if replica.scraped and load is not None and (load.kv_usage or 0.0) > self.config.saturated_kv:
            cap = min(cap, max(1, replica.in_flight))
        return cap

    @staticmethod
    def _proven_part(replica: Replica, slots: int) -> int:
        """The part of a replica's ``slots`` its engine has shown it runs (inlined in ``slot_counts``)."""
        if math.isinf(replica.ssthresh) or replica.proven < 1.0:
            return slots
        return min(slots, int(replica.proven))

    def slots(self, pool: str, now: float) -> int:
        """Total dispatch slots of ``pool`` for L1's ``slots`` argument."""
        state = self._pools[pool]
        if not state.indexed:
            total = 0
            for r in state.replicas:  # (a plain loop: sum over a generator costs twice as much here)
                total += self.replica_slots(r, now)
            return total
        self._catch_up(state, now)
        return state.slots

    def slot_counts(self, pool: str, now: float) -> tuple[int, int]:
        """``slots`` and ``proven_slots`` of ``pool`` in one pass (the flow needs both on every
        dispatch, and each replica's slots are counted once instead of twice)."""
        state = self._pools[pool]
        if not state.indexed:
            total = proven = 0
            isinf = math.isinf
            for r in state.replicas:
                n = self.replica_slots(r, now)
                total += n
                proven += n if isinf(r.ssthresh) or r.proven < 1.0 else min(n, int(r.proven))  # _proven_part
            return total, proven
        self._catch_up(state, now)
        return state.slots, state.proven

    def proven_slots(self, pool: str, now: float) -> int:
        """The part of ``slots`` each engine has shown it runs at once, for the holdback: a
        replica still in slow start counts whole (the lower tiers' traffic is how its limit is
        found); past it, only what its engine was seen running since the last cut, so a probe
        of the limit never counts as Turbo's headroom."""
        state = self._pools[pool]
        if not state.indexed:
            return sum(self._proven_part(r, self.replica_slots(r, now)) for r in state.replicas)
        self._catch_up(state, now)
        return state.proven

    def _catch_up(self, state: _Pool, now: float) -> None:
        self._now = max(self._now, now)
        if now > state.stale_at:  # someone's metrics went stale since: count everyone again
            state.stale_at = math.inf
            for r in state.replicas:
                self._refresh(r, now)

    def _refresh(self, replica: Replica, now: float | None = None) -> None:
        """Recount ``replica`` in its pool's running sums and room list (large pools only)."""
        state = self._pools[replica.pool]
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

    def next_probe_at(self, pool: str | None = None) -> float:
        """When the earliest ejected replica (of ``pool``) is re-probed (inf: none ejected)."""
        return min((r.next_probe_at for r in self.replicas(pool) if r.health is _EJECTED), default=math.inf)

    # ---- choice ----------------------------------------------------------------------------
    def pick(self, pool: str, now: float, exclude: Collection[str] = (), *, proven_only: bool = False,
             engine_priority: bool = False, beyond: int = 0, prefill_share: float | None = None) -> Replica | None:
        """The replica for the next request of ``pool``, or ``None`` if none can take one.

        ``proven_only`` (Turbo): only a replica whose in-flight count is below what its engine
        was seen running at once (``_turbo_room``; in slow start ``beyond`` more), so
        a probe of the limit (a slot the engine may not have) is taken by lower tiers and a
        Turbo request never waits in an engine's queue for it; among those, one with no request
        failure since its last good answer (one timing out may be hung) and with no request
        awaiting its first token (no prefill under way), so its own prefill does not share, or
        wait for, a longer engine step.  ``engine_priority``: the engines order their own queue by
        the request's ``priority`` (vLLM ``--scheduling-policy priority``), so a Turbo request
        sent past what an engine runs waits there ahead of the lower tiers, no longer than it
        would in the gateway: the probed slots are Turbo's too.  ``prefill_share`` (the request's
        prompt share of its tokens), with ``phase_weight`` set: the score weighs each replica's
        DCGM pressure for that phase (sched/phase.py)."""
        state = self._pools.get(pool)
        if state is None:
            return None
        best: Replica | None = None
        best_key = _NO_KEY
        safe: Replica | None = None
        safe_key: tuple[float, ...] = (math.inf,)
        if now > self._now:
            self._now = now
        indexed = state.indexed
        replicas = state.room if indexed else state.replicas
        n = len(replicas)
        if indexed and n > 2 * SAMPLE:
            replicas = self._sample(replicas, 2 * SAMPLE if proven_only else SAMPLE)
            n = len(replicas)
        rotor = state.rotor = (state.rotor + 1) % max(n, 1)
        band_of = self.band
        score_of: Scorer = self._score
        if prefill_share is not None and self.config.phase_weight > 0:
            score_of = phase_scorer(score_of, prefill_share, self.config.phase_weight)
        for i in range(n):  # start at a rotating index so ties spread evenly
            r = replicas[(rotor + i) % n]
            if r.health is not _HEALTHY or r.in_flight >= int(r.limit) or r.id in exclude:
                continue
            if not proven_only and r.lower_prefills >= r.prefill_gate:
                continue  # its engine has a lower tier's prefills for about a step already (sched/surge.py)
            band = band_of(r, now)
            key = (_BUSY if band is _LIGHT else band, score_of(r, band))
            if key < best_key:
                best, best_key = r, key
            if proven_only and (engine_priority or r.in_flight < self._turbo_room(r, beyond)):
                # A replica with request failures in a row (a deadline hit: it may be hung) is
                # Turbo's only when no other can take the request.
                strike = 1 if r.failures > 0 or r.probation else 0
                turbo_key = (strike, _PREFILLING if r.awaiting_first else 0, key[0], key[1])
                if safe is None or turbo_key < safe_key:
                    safe, safe_key = r, turbo_key
        # Past slow start, a Turbo request waits in the gateway (first in line for the next slot)
        # rather than behind others in an engine's queue at a replica beyond what it runs.
        chosen = safe if proven_only else best
        if chosen is None and indexed and len(state.room) > n:
            return self._scan(state, now, exclude, proven_only and not engine_priority, beyond,
                              score_of)  # none sampled would do
        return chosen

    def _turbo_room(self, replica: Replica, beyond: int) -> int:
        """How many requests a replica may hold and still take a Turbo one: what its engine was
        seen running at once.  In slow start never less than the initial limit, plus ``beyond``
        (up to the limit): the flow lets Turbo past what the engine ran only when no lower
        tier is queued to grow the limit (one more: Turbo alone must grow it a slot a scrape)
        or when its head has waited past ``TURBO_SLOW_START_PATIENCE_S`` (a cold gateway whose
        limits the lower tiers are still proving: better an engine's queue than starving).
        Otherwise not: a slow-start limit grown past the engine stalls there when the lower
        tiers' holdback line stops short of it, and Turbo would wait in the engine's queue (in
        simulation at the benchmark's controller speed, 5 seeds of 16 went from a 1.1× p95 to
        1.3–5×).  A replica without metrics (``scraped`` False) has no engine view and no limit
        probe to keep from Turbo: its whole limit is Turbo's room (else Turbo stayed at the
        initial limit while the lower tiers used the rest, and L1 dispatched Turbo tickets the
        pick then refused, over and over)."""
        if not replica.scraped:
            return int(replica.limit)
        if math.isinf(replica.ssthresh):
            if replica.slow_start_idle >= SLOW_START_STALLED_SCRAPES:
                beyond = min(beyond, 1)  # stalled: the slots above may not exist
            return max(min(int(replica.proven) + beyond, int(replica.limit)),
                       min(self.config.initial_limit, int(replica.limit)))
        return int(replica.proven)

    def _sample(self, room: list[Replica], k: int) -> list[Replica]:
        """``k`` distinct replicas from ``room`` by a fixed pseudo-random sequence (a
        deterministic xorshift, so a simulation is reproducible)."""
        n = len(room)
        x = self._sample_seed
        picked: list[Replica] = []
        seen: set[int] = set()
        while len(picked) < k:
            x ^= (x << 13) & 0xFFFFFFFF
            x ^= x >> 17
            x ^= (x << 5) & 0xFFFFFFFF
            i = x % n
            if i not in seen:
                seen.add(i)
                picked.append(room[i])
        self._sample_seed = x
        return picked

    def _scan(self, state: _Pool, now: float, exclude: Collection[str], proven_only: bool,
              beyond: int, score_of: Scorer) -> Replica | None:
        best: Replica | None = None
        best_key = _NO_KEY
        for r in state.room:
            if r.id in exclude or (proven_only and r.in_flight >= self._turbo_room(r, beyond)):
                continue
            band = self.band(r, now)
            key = (_BUSY if band is _LIGHT else band, score_of(r, band))
            if key < best_key:
                best, best_key = r, key
        return best

    def pick_plain(self, pool: str, how: str, exclude: Collection[str] = ()) -> Replica | None:
        """Baselines without limits or metrics: ``round-robin`` over healthy replicas, or
        ``least-outstanding`` (fewest in flight)."""
        state = self._pools.get(pool)
        if state is None:
            return None
        candidates = [r for r in state.replicas if r.health is _HEALTHY and r.id not in exclude]
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
        if self._pools[replica.pool].indexed:  # (small pools keep no running sums: no call per dispatch)
            self._refresh(replica)

    # ---- outcomes --------------------------------------------------------------------------
    def on_response(self, replica: Replica, status: int, latency_s: float, now: float) -> None:
        """The replica answered (any HTTP status).  A 5xx from the engine counts as a soft
        failure (a storm of them ejects it); anything else proves it alive and feeds its
        service time."""
        replica.in_flight = max(0, replica.in_flight - 1)
        if status >= 500:
            self._fail(replica, now, hard=False, reason=f"answered HTTP {status}")
        else:
            replica.failures = 0
            replica.probation = False
            replica.served += 1
            prev = replica.service_s
            replica.service_s = latency_s if prev is None else prev + 0.2 * (latency_s - prev)
        if self._pools[replica.pool].indexed:
            self._refresh(replica, now)

    def on_failure(self, replica: Replica, now: float, *, hard: bool, dispatched: bool = True,
                   reason: str = "") -> None:
        """A request failed without an answer.  ``hard`` (connection refused) ejects at once;
        soft failures eject after ``eject_after_failures`` in a row."""
        if dispatched:
            replica.in_flight = max(0, replica.in_flight - 1)
        self._fail(replica, now, hard=hard, reason=reason or ("connection refused" if hard else "request failed"))
        self._refresh(replica, now)

    def on_release(self, replica: Replica) -> None:
        """A request ended without telling anything about the replica (client went away)."""
        replica.in_flight = max(0, replica.in_flight - 1)
        self._refresh(replica)

    def _fail(self, replica: Replica, now: float, *, hard: bool, reason: str) -> None:
        replica.failures += 1
        if replica.health is _HEALTHY and (hard or replica.failures >= self.config.eject_after_failures):
            why = reason if hard else f"{replica.failures} failures in a row, the last: {reason}"
            self._eject(replica, now, why)

    def eject(self, replica: Replica, now: float, reason: str) -> None:
        """Eject a healthy ``replica`` on a rule of the flow's (a hung one: sched/hung.py)."""
        if replica.health is _HEALTHY:
            self._eject(replica, now, reason)

    def _eject(self, replica: Replica, now: float, reason: str) -> None:
        replica.health = _EJECTED
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
        self._refresh(replica, now)

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
            if replica.health is _HEALTHY and (
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
        if load.running:
            replica.silent_full_scrapes = 0
        elif (load.running is not None and not load.waiting
              and replica.peak_in_flight >= max(1.0, LOWER_TIERS_BAR * replica.limit)):  # slow start's own bar
            replica.silent_full_scrapes += 1
            if replica.silent_full_scrapes == SILENT_ENGINE_SCRAPES:
                self._doubts.append(MetricsDoubt(replica, (
                    f"its engine reported 0 requests running on {SILENT_ENGINE_SCRAPES} scrapes while this gateway "
                    f"kept its {int(replica.limit)} slots busy: the adaptive limit grows only on the engine's "
                    "running count, so it stays there. Check that metrics_path serves this engine's own load metrics "
                    "(engine kind and metric names); for a server without load metrics set engine: openai, which "
                    "counts the gateway's own in-flight requests up to max_concurrency")))
        adapt_limit(replica, load, self.config)
        self._refresh(replica, now)

    # ---- health ----------------------------------------------------------------------------
    def due_probes(self, now: float) -> list[Replica]:
        """Ejected replicas whose re-probe time has come; each is not returned again until its
        probe result is reported (or its backoff passes once more)."""
        due = [r for r in self.replicas() if r.health is _EJECTED and r.next_probe_at <= now]
        for r in due:
            r.next_probe_at = now + r.backoff_s
        return due

    def on_probe(self, replica: Replica, ok: bool, now: float) -> None:
        if replica.health is _HEALTHY:
            if not ok:  # a periodic check of a replica without metrics
                self._fail(replica, now, hard=False, reason="health check failed")
            return
        if ok:
            replica.health = _HEALTHY
            # Back on probation: /health proves the process up, not that it answers (a hung engine
            # still does), so its request failures stay one short of ejection until a good answer
            # clears them; Turbo avoids it meanwhile (pick).
            replica.failures = min(replica.failures, self.config.eject_after_failures - 1)
            replica.probation = True
            replica.scrape_failures = 0
            replica.load_at = -math.inf  # stale until the next scrape
            self._changes.append(HealthChange(replica, True, "health probe answered 200"))
            self._refresh(replica, now)
            return
        replica.backoff_s = min(self.config.probe_backoff_max_s, max(replica.backoff_s, 1e-3) * 2.0)
        replica.next_probe_at = now + replica.backoff_s

    # ---- pool signals ----------------------------------------------------------------------
    def scale_out_desired(self, pool: str, now: float) -> bool:
        """True once no healthy replica of ``pool`` has been light or busy for
        ``scale_out_after_s`` (call it regularly: it also tracks the start of that spell)."""
        state = self._pools[pool]
        saturated = all(
            r.health is not _HEALTHY or self.band(r, now) is _SATURATED for r in state.replicas
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
                "eject_reason": r.eject_reason if r.health is _EJECTED else None,
                "band": self.band(r, now).name.lower(),
                "score": round(self.score(r, now), 4),
                "in_flight": r.in_flight,
                "limit": round(r.limit, 2),
                "proven": r.proven,
                "slow_start": math.isinf(r.ssthresh),
                "awaiting_first": r.awaiting_first,
                "max_concurrency": r.cap,
                "slots": self.replica_slots(r, now),
                "served": r.served,
                "ejections": r.ejections,
                "failures": r.failures,
                "metrics_age_s": None if r.load_at == -math.inf else round(now - r.load_at, 3),
                "running": r.load.running if r.load else None,
                "waiting": r.load.waiting if r.load else None,
                "kv_usage": r.load.kv_usage if r.load else None,
                "tensor_active": r.load.tensor_active if r.load else None,  # DCGM's (sched/phase.py)
                "dram_active": r.load.dram_active if r.load else None,
            }
