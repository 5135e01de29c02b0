"""L3: which pool serves a request, when a model is served by several (regions, or a Turbo pool
beside a Standard one).  Pure and ``now``-driven; the flow calls it from ``open`` (sched/flow.py).

**Expected latency** of pool ``p`` for a client of region ``c`` = the EWMA of latency samples
for ``(c, p)`` + the wait the pool's own state predicts (L1's queue wait for the request's tier,
plus L2's shortest engine queue).  A sample is the configured client-leg round trip from region
``c`` to the pool's region (``rtt_ms``; 0 when not given) plus a round trip the gateway measured:
a probe of one of the pool's replicas (its health path), or an observed call — a stream's
dispatch → response headers, which engines (vLLM, the emulator) send as soon as they accept the
request, before prefill, so it measures the same thing as a probe and not the prompt's length.
A probe feeds every client region the pool knows; an observed call feeds its own client region
(and the pool's base value, the start of a client region seen for the first time).

**Choice.**  The pools are ranked by expected latency.  An unhealthy pool (no healthy replica)
or a saturated one (L1 would shed the request, or every healthy replica is in the saturated
band) is passed over for the next best: a failover.  When none is usable, the best healthy one
is still chosen (L1 then queues or sheds it with a truthful ``Retry-After``), and with none
healthy the best one (the flow answers 503 ``no_healthy_replica``).

**Stickiness.**  A session (tenant + ``X-Session-Id``) keeps the pool it was given while it is
usable, for ``sticky_s`` after its last request (so its engine's prefix cache stays warm); an
unusable sticky pool fails the session over, and the session sticks to the new pool.

**Turbo fallback.**  A Turbo request goes only to Turbo-capable pools; when every one of them is
unhealthy (or the model has none), it is served Standard by the other pools and the answer says
why (``X-Turbogate-Downgrade: turbo_pools_unhealthy``).
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from turbogate.sched.admission import Admission
from turbogate.sched.picker import Picker
from turbogate.sched.replica import Band, Health, Replica
from turbogate.sched.ticket import TierPolicy
from turbogate.sched.tiers import Tier

#: What a region name may look like (a header value is checked against it: anything else is a 400).
REGION_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")

#: The downgrade reason when Turbo falls back to the Standard pools.
TURBO_FALLBACK = "turbo_pools_unhealthy"
NO_TURBO_POOL = "no_turbo_pool"  # the model has no Turbo-capable pool at all


@dataclass(frozen=True, slots=True)
class RegionPolicy:
    """L3's settings (config ``regions``)."""

    #: client region → pool region → round trip in ms: the client's leg, added to every sample.
    rtt_ms: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    default_region: str = ""  # a client that names no region
    alpha: float = 0.3  # EWMA weight of a new sample
    sticky_s: float = 300.0  # a session keeps its pool this long after its last request
    max_sessions: int = 100_000  # sessions remembered (least recently used forgotten first)
    max_client_regions: int = 256  # more distinct client regions than this count as the default one
    probe_interval_s: float = 5.0  # round-trip probes, one replica per pool
    #: A pool's L1/L2 view is re-read at most this often (and at once after a health change):
    #: reading it scans the pool's replicas, and L3 is a coarse choice that a few ms do not change.
    view_ttl_s: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")


class PoolView(NamedTuple):
    """What L1 and L2 say about one candidate pool right now."""

    name: str
    healthy: bool
    saturated: bool
    wait_s: float  # expected wait before the engine starts it (L1 queue + L2 engine queue)


class MeasureRtt(NamedTuple):
    """Time a round trip to ``replica`` (its health path) and report it with ``Flow.rtt_measured``."""

    replica: Replica


def rtt_probes(picker: Picker, pools: Sequence[str], turn: int) -> list[MeasureRtt]:
    """One healthy replica per pool to probe this round (a different one each round)."""
    out: list[MeasureRtt] = []
    for name in pools:
        healthy = [r for r in picker.replicas(name) if r.health is Health.HEALTHY]
        if healthy:
            out.append(MeasureRtt(healthy[turn % len(healthy)]))
    return out


class Choice(NamedTuple):
    pool: str
    how: str  # "only" | "best" | "sticky" | "failover" | "degraded" (none usable)


def pool_view(name: str, picker: Picker, admission: Admission, tier: Tier, tier_policy: TierPolicy,
              now: float) -> PoolView:
    """L1/L2 state of pool ``name`` for a request of ``tier``."""
    slots = picker.slots(name, now)
    if slots <= 0:
        return PoolView(name, False, True, 0.0)  # ranked by latency alone: a failover is then one
    service = admission.service_estimate_s or picker.config.default_service_s
    ahead = admission.queued + max(0, admission.in_flight - slots + 1)
    l1 = admission.predicted_wait_s(tier, slots)
    if l1 is None:
        l1 = ahead * service / slots if ahead else 0.0
    l2 = math.inf
    all_saturated = True
    for r in picker.replicas(name):
        if r.health is not Health.HEALTHY:
            continue
        l2 = min(l2, picker.expected_queue_s(r))
        if all_saturated and picker.band(r, now) is not Band.SATURATED:
            all_saturated = False
    full = admission.queue_length(tier) >= tier_policy.queue_bound or l1 > tier_policy.queue_limit_s
    return PoolView(name, True, full or all_saturated, l1 + (0.0 if math.isinf(l2) else l2))


class Regions:
    """Latency estimates, sessions and the choice among a model's pools."""

    def __init__(self, policy: RegionPolicy, pool_regions: Mapping[str, str | None]) -> None:
        self.policy = policy
        self.pool_regions = dict(pool_regions)
        self._ewma: dict[tuple[str, str], float] = {}
        self._base: dict[str, float] = {}  # per pool, over every client region
        self._clients: set[str] = set(policy.rtt_ms)
        self._sessions: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
        self._views: dict[tuple[str, Tier], tuple[float, PoolView]] = {}
        self.failovers = 0  # choices that passed over a better-ranked pool

    def view(self, name: str, tier: Tier, now: float, read: Callable[[], PoolView]) -> PoolView:
        """Pool ``name``'s view for ``tier``: ``read()`` at most every ``view_ttl_s``."""
        key = (name, tier)
        cached = self._views.get(key)
        if cached is not None and 0.0 <= now - cached[0] < self.policy.view_ttl_s:
            return cached[1]
        fresh = read()
        self._views[key] = (now, fresh)
        return fresh

    def forget_views(self) -> None:
        """A replica's health changed: read every pool afresh."""
        self._views.clear()

    # ---- estimates -------------------------------------------------------------------------
    def client(self, region: str | None) -> str:
        """The region key for a client (the default for none, or past ``max_client_regions``)."""
        if not region:
            return self.policy.default_region
        if region not in self._clients:
            if len(self._clients) >= self.policy.max_client_regions:
                return self.policy.default_region
            self._clients.add(region)
        return region

    def leg_s(self, client: str, pool: str) -> float:
        """The configured client-leg round trip from ``client`` to ``pool``'s region (0: unknown)."""
        table = self.policy.rtt_ms.get(client)
        region = self.pool_regions.get(pool)
        if table is None or region is None:
            return 0.0
        return table.get(region, 0.0) / 1000.0

    def latency_s(self, client: str, pool: str) -> float:
        """The current estimate for ``(client, pool)``, before any queue wait."""
        est = self._ewma.get((client, pool))
        if est is not None:
            return est
        return self.leg_s(client, pool) + self._base.get(pool, 0.0)

    def _feed(self, key: tuple[str, str], sample: float) -> None:
        old = self._ewma.get(key)
        self._ewma[key] = sample if old is None else old + self.policy.alpha * (sample - old)

    def _feed_base(self, pool: str, measured: float) -> None:
        old = self._base.get(pool)
        self._base[pool] = measured if old is None else old + self.policy.alpha * (measured - old)

    def observe(self, client: str, pool: str, measured_s: float) -> None:
        """A call from ``client`` served by ``pool`` measured ``measured_s`` (dispatch → response headers)."""
        if measured_s < 0 or not math.isfinite(measured_s):
            return
        self._feed((client, pool), self.leg_s(client, pool) + measured_s)
        self._feed_base(pool, measured_s)

    def probed(self, pool: str, rtt_s: float) -> None:
        """A probe of one of ``pool``'s replicas came back after ``rtt_s``: a sample for every
        client region known."""
        if rtt_s < 0 or not math.isfinite(rtt_s):
            return
        self._feed_base(pool, rtt_s)
        for client in self._clients | {self.policy.default_region}:
            self._feed((client, pool), self.leg_s(client, pool) + rtt_s)

    # ---- the choice ------------------------------------------------------------------------
    def choose(self, client: str, session: tuple[str, str] | None, views: Sequence[PoolView], now: float) -> Choice:
        """The pool for a request from ``client`` (see the module docstring)."""
        if len(views) == 1:
            return Choice(views[0].name, "only")
        ranked = sorted(views, key=lambda v: (self.latency_s(client, v.name) + v.wait_s, v.name))
        usable = [v for v in ranked if v.healthy and not v.saturated]
        sessions = self._sessions
        if session is not None:
            stuck = sessions.get(session)
            if stuck is not None:
                pool, until = stuck
                if until >= now and any(v.name == pool for v in usable):
                    self._stick(session, pool, now)
                    return Choice(pool, "sticky")
                del sessions[session]  # expired, or its pool is not usable: choose again
        if usable:
            best = usable[0]
            how = "best" if best is ranked[0] else "failover"
            if how == "failover":
                self.failovers += 1
            if session is not None:
                self._stick(session, best.name, now)
            return Choice(best.name, how)
        healthy = [v for v in ranked if v.healthy]
        return Choice((healthy or ranked)[0].name, "degraded")

    def _stick(self, session: tuple[str, str], pool: str, now: float) -> None:
        sessions = self._sessions
        sessions[session] = (pool, now + self.policy.sticky_s)
        sessions.move_to_end(session)
        while len(sessions) > self.policy.max_sessions:
            sessions.popitem(last=False)

    def sessions(self) -> int:
        return len(self._sessions)

    def snapshot(self) -> dict[str, object]:
        """For the admin state: the estimates in ms."""
        return {
            "latency_ms": {f"{c or '-'}→{p}": round(v * 1000, 3) for (c, p), v in sorted(self._ewma.items())},
            "pool_ms": {p: round(v * 1000, 3) for p, v in sorted(self._base.items())},
            "sessions": len(self._sessions),
            "failovers": self.failovers,
        }


def turbo_candidates(pools: Sequence[str], turbo_capable: Mapping[str, bool], healthy: Mapping[str, bool]
                     ) -> tuple[list[str], str | None]:
    """The pools a Turbo request may go to, and why it falls back to Standard (None: it does
    not): the Turbo-capable pools while any of them is healthy; else the other pools, when one
    of them is (with none healthy anywhere, the Turbo pools: the flow answers 503)."""
    turbo = [p for p in pools if turbo_capable.get(p, True)]
    others = [p for p in pools if not turbo_capable.get(p, True)]
    if not turbo:
        return others, NO_TURBO_POOL
    if any(healthy.get(p, False) for p in turbo):
        return turbo, None
    if any(healthy.get(p, False) for p in others):
        return others, TURBO_FALLBACK
    return turbo, None
