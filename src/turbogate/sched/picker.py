"""L2 replica choice: which replica of a pool takes the next request, and what each outcome
(answer, failure, scrape, probe) tells L2.  Pure and ``now``-driven.

What each replica offers (its band, score and slots) is kept in sched/replica_book.py, whose
``ReplicaBook`` this extends; the concurrency limit each replica offers is learned from its
engine (sched/concurrency.py); ejection and re-probing are sched/health.py's rules.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from typing import TypeVar

from turbogate.sched import health
from turbogate.sched.concurrency import LOWER_TIERS_BAR, adapt_limit, presume_batch
from turbogate.sched.learned import adopt
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
from turbogate.sched.replica_book import PoolState, ReplicaBook
from turbogate.sched.surge import keeps_clear, last_clear_left, lower_shut

__all__ = ["Band", "Health", "HealthChange", "MetricsDoubt", "Picker", "PickerConfig", "Replica", "ScrapeFailed"]

T = TypeVar("T")


def _taken(items: list[T]) -> tuple[Sequence[T], list[T]]:
    """``items`` handed over and the list to keep collecting in; nothing pending (the usual case,
    after every event) allocates no new list."""
    return ((), items) if not items else (items, [])


#: Scrapes without growth after which a slow start counts as stalled (``Picker._turbo_room``).
SLOW_START_STALLED_SCRAPES = 2

# Read several times per replica per pick: module names, not lookups through the enum class.
_HEALTHY, _EJECTED = Health.HEALTHY, Health.EJECTED
_LIGHT, _BUSY, _SATURATED = Band.LIGHT, Band.BUSY, Band.SATURATED
_NO_KEY = (_SATURATED + 1, math.inf)  # worse than any replica's (band, score)

#: Large pools (sched/replica_book.py ``SCAN_MAX``) choose among this many replicas sampled
#: from those with room (the "power of k choices"), so a decision costs the same for 8
#: replicas and for 1,000.
SAMPLE = 4


class Picker(ReplicaBook):
    """L2 for every pool of the gateway (or of a simulated fleet)."""

    def __init__(self, config: PickerConfig | None = None) -> None:
        super().__init__(config)
        #: Health changes since the caller last took them (``take_health_changes``).
        self._changes: list[HealthChange] = []
        self._doubts: list[MetricsDoubt] = []
        self._sample_seed = 0x9E3779B9

    def take_metrics_doubts(self) -> Sequence[MetricsDoubt]:
        """Replicas whose metrics cannot steer their limit, since the last call (rare)."""
        doubts, self._doubts = _taken(self._doubts)
        return doubts

    def take_health_changes(self) -> Sequence[HealthChange]:
        changes, self._changes = _taken(self._changes)
        return changes

    # ---- choice ----------------------------------------------------------------------------
    def pick(self, pool: str, now: float, exclude: Collection[str] = (), *, proven_only: bool = False,
             engine_priority: bool = False, beyond: int = 0, prefill_share: float | None = None,
             keep_clear: bool = False) -> Replica | None:
        """The replica for the next request of ``pool``, or ``None`` if none can take one.

        ``proven_only`` (Turbo): only a replica whose in-flight count is below what its engine
        was seen running at once (``_turbo_room``; in slow start ``beyond`` more), so
        a probe of the limit (a slot the engine may not have) is taken by lower tiers and a
        Turbo request never waits in an engine's queue for it; among those, one with no request
        failure since its last good answer (one timing out may be hung) and with the fewest of
        ours awaiting a first token (prefills under way), so its own prefill shares, or waits
        for, as few others as it can (under an overload every replica prefills something, and
        a burst chosen by score alone meets in one engine step); among as many, the one whose
        latest was sent first: its prefills are nearest done, where one just sent would share
        Turbo's engine step (docs/gateway.md).  ``engine_priority``: the
        engines order their own queue by the request's ``priority`` (vLLM
        ``--scheduling-policy priority``), so a Turbo request sent past what an engine runs
        waits there ahead of the lower tiers, no longer than it would in the gateway: the probed
        slots are Turbo's too.  ``prefill_share`` (the request's
        prompt share of its tokens), with ``phase_weight`` set: the score weighs each replica's
        DCGM pressure for that phase (sched/phase.py).  ``keep_clear`` (a lower tier, while
        they queue or a surge is told): the last replica with no lower-tier prefill under way is
        not taken where a prefill is dear (sched/surge.py ``keeps_clear``)."""
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
        last_clear = keep_clear and not proven_only and not indexed and last_clear_left(state.replicas)
        band_of = self.band
        score_of: Scorer = self._score
        if prefill_share is not None and self.config.phase_weight > 0:
            score_of = phase_scorer(score_of, prefill_share, self.config.phase_weight)
        for i in range(n):  # start at a rotating index so ties spread evenly
            r = replicas[(rotor + i) % n]
            if r.health is not _HEALTHY or r.in_flight >= int(r.limit) or r.id in exclude:
                continue
            if not proven_only and (lower_shut(r) or (last_clear and keeps_clear(r))):
                continue  # a step's worth of lower-tier prefills, or Turbo's, under way (sched/surge.py)
            band = band_of(r, now)
            key = (_BUSY if band is _LIGHT else band, score_of(r, band))
            if key < best_key:
                best, best_key = r, key
            if proven_only and (engine_priority or r.in_flight < self._turbo_room(r, beyond)):
                # A replica with request failures in a row (a deadline hit: it may be hung) is
                # Turbo's only when no other can take the request.
                strike = 1 if r.failures > 0 or r.probation else 0
                turbo_key = (strike, r.awaiting_first, r.last_sent if r.awaiting_first else 0.0, key[0], key[1])
                if safe is None or turbo_key < safe_key:
                    safe, safe_key = r, turbo_key
        # Past slow start, a Turbo request waits in the gateway (first in line for the next slot)
        # rather than behind others in an engine's queue at a replica beyond what it runs.
        chosen = safe if proven_only else best
        if chosen is None and indexed and len(state.room) > n:
            return self._scan(state, now, exclude, proven_only and not engine_priority, beyond,
                              score_of, lower=not proven_only)  # none sampled would do
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

    def _scan(self, state: PoolState, now: float, exclude: Collection[str], proven_only: bool,
              beyond: int, score_of: Scorer, *, lower: bool) -> Replica | None:
        """``pick`` over every replica with room, where a sample found none (``lower``: for a
        lower tier, so the prefill gate holds as in a small pool)."""
        best: Replica | None = None
        best_key = _NO_KEY
        for r in state.room:
            if r.id in exclude or (proven_only and r.in_flight >= self._turbo_room(r, beyond)):
                continue
            if lower and lower_shut(r):
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
        if self._pools[replica.pool].indexed:  # only large pools keep running sums
            self._refresh(replica)

    # ---- outcomes --------------------------------------------------------------------------
    def on_response(self, replica: Replica, status: int, latency_s: float, now: float) -> None:
        """The replica answered (any HTTP status).  A 5xx from the engine counts as a soft
        failure (a storm of them ejects it); anything else proves it alive and feeds its
        service time."""
        replica.in_flight = max(0, replica.in_flight - 1)
        if status >= 500:
            self._noted(health.failed(replica, now, self.config, hard=False, reason=f"answered HTTP {status}"), now)
        else:
            health.answered(replica, latency_s)
        if self._pools[replica.pool].indexed:
            self._refresh(replica, now)

    def on_failure(self, replica: Replica, now: float, *, hard: bool, dispatched: bool = True,
                   reason: str = "") -> None:
        """A request failed without an answer.  ``hard`` (connection refused) ejects at once;
        soft failures eject after ``eject_after_failures`` in a row."""
        if dispatched:
            replica.in_flight = max(0, replica.in_flight - 1)
        self._noted(health.failed(replica, now, self.config, hard=hard,
                                  reason=reason or ("connection refused" if hard else "request failed")), now)
        self._refresh(replica, now)

    def adopt_learned(self, replica: Replica, text: str, wall_now: float) -> bool:
        """Take another process's learned limit for ``replica`` (sched/learned.py's rule) and
        recount it in its pool, as every other change to a replica is; whether it was taken."""
        taken = adopt(replica, text, wall_now)
        if taken:
            self._refresh(replica)
        return taken

    def on_release(self, replica: Replica) -> None:
        """A request ended without telling anything about the replica (client went away)."""
        replica.in_flight = max(0, replica.in_flight - 1)
        self._refresh(replica)

    def eject(self, replica: Replica, now: float, reason: str) -> None:
        """Eject a healthy ``replica`` on a rule of the flow's (a hung one: sched/hung.py)."""
        if replica.health is _HEALTHY:
            self._noted(health.eject(replica, now, self.config, reason), now)

    def _noted(self, change: HealthChange | None, now: float) -> None:
        """Hand ``change`` to the caller (``take_health_changes``) and recount its replica."""
        if change is not None:
            self._changes.append(change)
            self._refresh(change.replica, now)

    # ---- scrapes -----------------------------------------------------------------------------
    def on_scrape(self, replica: Replica, result: ReplicaLoad | ScrapeFailed, now: float) -> None:
        """Classify one scrape: a load updates the bands and the adaptive limit; a failed one is
        sched/health.py's (``scrape_failed``)."""
        if isinstance(result, ScrapeFailed):
            self._noted(health.scrape_failed(replica, result, now, self.config), now)
            return
        # A good scrape does not clear request failures: a hung engine may still serve /metrics.
        replica.scrape_failures = 0
        self.on_metrics(replica, result, now)

    def on_metrics(self, replica: Replica, load: ReplicaLoad, now: float) -> None:
        pool = self._pools[replica.pool]
        # Since its last scrape, a lower tier waited at its holdback line: slow start's bar is
        # that line, or the lower tiers, held below the bar, never prove the limit full.
        held = pool.held_share if pool.held_at >= replica.load_at else None
        replica.load = load
        replica.load_at = now
        # Compare with our in-flight count *now*, at scrape time: later our count moves on while
        # the scraped one stands still, and the difference would look like someone else's load.
        replica.foreign = max(0.0, (load.running or 0.0) + (load.waiting or 0.0) - replica.in_flight)
        replica.scrape_in_flight = replica.in_flight
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
        batch = replica.batch_seen
        adapt_limit(replica, load, self.config, held)
        if replica.batch_seen > batch:  # its engine's batch, shown now: its pool's others likely share it
            for sibling in presume_batch(replica, pool.replicas):
                self._refresh(sibling, now)
        self._refresh(replica, now)

    # ---- health ----------------------------------------------------------------------------
    def next_probe_at(self, pool: str | None = None) -> float:
        """When the earliest ejected replica (of ``pool``) is re-probed (inf: none ejected)."""
        return health.next_probe_at(self.replicas(pool))

    def due_probes(self, now: float) -> list[Replica]:
        """Ejected replicas whose re-probe time has come (sched/health.py ``due_probes``)."""
        return health.due_probes(self.replicas(), now)

    def on_probe(self, replica: Replica, ok: bool, now: float) -> None:
        self._noted(health.probed(replica, ok, now, self.config), now)

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
