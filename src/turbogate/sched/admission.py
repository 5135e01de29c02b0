"""L1 admission: per-tier queues, strict tier precedence with guaranteed minimum shares, fair
shares within a tier.

Pure and sans-I/O: every method takes ``now`` (seconds on any monotonic clock) and ``slots``
(the dispatch slots the pool can use right now, from the L2 picker), so the gateway (real
clock) and the simulator (virtual clock) drive the very same decisions.

How the next request is chosen (``next_dispatch``):

* **Strict precedence.**  The best tier with a queued head that its limits allow goes first:
  Turbo before Standard before Relax.  Waiting does not raise a request's rank — under a
  sustained overload every lower-tier head is old, and an age bonus would turn the tiers into
  FIFO (measured: Turbo p95 TTFT 29 ms → 8.6 s at 2× load with 10 s aging).
* **Minimum shares against starvation.**  Each tier's share of recent dispatches is tracked
  (an EWMA over about the last ``1 / SHARE_ALPHA`` dispatches), counting only the dispatches
  made while the tier had requests queued: a tier with nothing waiting is kept from nothing (a
  night of Turbo alone must not leave Standard owed in the morning).  A tier with requests
  queued whose share is below its ``min_share`` is *owed*: its head goes next, past the holdback
  (its ``capacity_share`` cap still holds).  A share never falls more than one dispatch below
  ``min_share``, so an owed tier gets its minimum from then on, interleaved with Turbo, and not
  a long shortfall repaid in one block while Turbo waits (seconds, on a small fleet).  So under
  any load Standard gets at least ``min_share`` of the dispatches and Relax never starves to
  zero, while Turbo keeps strict precedence for the rest — and a tier that already gets more
  than its minimum (the usual case) never jumps ahead, so the holdback's headroom stays Turbo's.
* **Caps and holdback.**  A tier dispatches only while its own in-flight count is under
  ``capacity_share × slots`` and — the *priority holdback* — the pool's total in-flight count
  is under ``max_utilization × slots``: lower tiers stop short of full use so that headroom
  stays for Turbo arrivals, which then start at once instead of waiting for a completion.
* **Fairness within a tier.**  Tenants share by start-time fair queueing on tokens: a
  request's tag is ``max(tier virtual time, tenant's previous finish tag)`` and the tenant's
  finish tag grows by ``cost / tenant weight``; the smallest tag goes first.  Costs are bounded
  by the caller (see ``sched/flow.py``) so one huge request cannot push virtual time out of
  reach of everyone else.
"""

from __future__ import annotations

import builtins
import functools
import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from turbogate.sched.codel import ControlledDelay
from turbogate.sched.surge import ArrivalPace, turbo_deficit
from turbogate.sched.tiers import RANK, TIERS, Tier
from turbogate.sched.turbo_supply import TurboSupply

#: Weight of one dispatch in each tier's recent-share EWMA (about the last 200 dispatches): long
#: enough that a burst of Turbo, which takes most dispatches for a few seconds, does not make a
#: lower tier owed and let it pass queued Turbo requests (at 50, Turbo's p95 at 2× rose tenfold).
SHARE_ALPHA = 0.005
#: Time constant (s) of the top tier's arrival rate and the pool's completion rate.
RATE_TAU_S = 10.0
#: The holdback ends when the top tier has been silent this many of its mean gaps (and at least
#: ``QUIET_MIN_S``): a Poisson stream is that quiet by chance e^-10 ≈ 0.005 % of the time (at
#: e^-5 the headroom went to the lower tiers often enough to double Turbo's p95 at 2× overload:
#: it comes back only as requests complete), while a stream that stopped would otherwise keep
#: slots idle until its decaying rate estimate fell, some 40 s after a few requests a second.
QUIET_GAPS = 10.0
QUIET_MIN_S = 5.0


class _Rate:
    """Events per second, an exponentially decaying average over ``RATE_TAU_S``."""

    __slots__ = ("at", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.at = 0.0

    def add(self, now: float) -> None:
        dt = now - self.at
        value = self.value  # (``read`` inlined: one call per completion instead of two)
        if dt > 0 and value:
            value *= math.exp(-dt / RATE_TAU_S)
        self.value = value + 1.0 / RATE_TAU_S
        self.at = now

    def read(self, now: float) -> float:
        dt = now - self.at
        # (0.0 decays to 0.0: no exp for a tier nobody asks, read on every dispatch)
        return self.value * math.exp(-dt / RATE_TAU_S) if dt > 0 and self.value else self.value


def headroom_slots(top_rate: float, completion_rate: float, risk: float, most: int, staffing: bool = True) -> int:
    """Slots to keep free for the top tier so that an arrival finds none with probability about
    ``risk``; the larger of two bounds.

    * Kept-free slots are used by top-tier arrivals and given back by completions (lower tiers do
      not refill them): a birth–death chain whose empty state has probability about
      ρ^R (1 − ρ) with ρ = arrivals / completions; hence R = ln(risk / (1 − ρ)) / ln ρ.
    * ``staffing``: that chain assumes completions come at the pool's mean rate.  They do not when
      service times are alike (a fixed output length): the lower tiers refill whatever Turbo
      leaves, and their requests free nothing for a whole service time, so Turbo's own in-flight
      count must be able to grow by its natural swing over that time.  It is about Poisson with
      mean a = λ × service (Little's law), and square-root staffing (Halfin–Whitt) gives the spare
      slots: β √a, with β the one whose delay probability is ``risk``.  Without it Turbo's p95 at
      2× overload reached 1.55× its unloaded value in simulation and 3–25× in real runs.  It costs
      the lower tiers throughput (4 % of goodput in docs/sim.md's 2× table; 11 % in the knee
      guard's small pools, whose guard caps Turbo's load itself: see ``Flow``).
    """
    if top_rate <= 0.0 or completion_rate <= 0.0:  # no evidence yet: the static line alone
        return 0
    if completion_rate <= top_rate:
        return most
    rho = top_rate / completion_rate
    chain = math.ceil(math.log(risk / (1.0 - rho)) / math.log(rho))
    if not staffing:
        return min(most, max(0, chain))
    offered = top_rate * most / completion_rate  # λ × service, as completion_rate = slots / service
    return min(most, max(0, chain, math.ceil(_staffing_beta(risk) * math.sqrt(offered))))


@functools.lru_cache(maxsize=8)
def _staffing_beta(risk: float) -> float:
    """β with Halfin–Whitt delay probability [1 + β Φ(β) / φ(β)]⁻¹ = ``risk`` (bisection; the
    probability falls as β grows).  0.05 gives about 1.74, 0.02 about 2.12."""
    def delay(beta: float) -> float:
        cdf = 0.5 * (1.0 + math.erf(beta / math.sqrt(2.0)))
        pdf = math.exp(-beta * beta / 2.0) / math.sqrt(2.0 * math.pi)
        return 1.0 / (1.0 + beta * cdf / pdf)
    lo, hi = 0.0, 6.0
    for _ in range(50):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if delay(mid) > risk else (lo, mid)
    return hi


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """How one tier is admitted and dispatched (see the module docstring)."""

    capacity_share: float = 1.0
    max_utilization: float = 1.0
    queue_bound: int = 1024
    queue_budget_s: float = 30.0
    deadline_s: float = 300.0
    min_share: float = 0.0
    #: The tier's TTFT objective: with one, a standing queue is served newest first (sched/codel.py).
    ttft_slo_s: float | None = None

    @property
    def queue_limit_s(self) -> float:
        """Longest a request of this tier may wait queued: its queue budget, or its deadline if
        that comes first (one rule for the gateway and the simulator)."""
        return min(self.queue_budget_s, self.deadline_s)


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """A tenant's weight for fair sharing and its cap on queued + running requests."""

    weight: float = 1.0
    max_in_flight: int | None = None


#: The policy of a tenant the admission was not told of (frozen: one shared value will do).
_ANY_TENANT = TenantPolicy()


class State(Enum):
    QUEUED = 1
    DISPATCHED = 2
    DONE = 3


# Module constants: enum attribute access goes through a descriptor, and this is the hot path.
_QUEUED, _DISPATCHED, _DONE = State.QUEUED, State.DISPATCHED, State.DONE
_TOP = TIERS[0]


@dataclass(slots=True, eq=False)
class Ticket:
    """One request inside L1.  ``payload`` is opaque to L1 (the flow's own request)."""

    tenant: str
    tier: Tier
    arrival: float
    cost: float = 1.0
    # builtins.object, not object: compiled by mypyc, a dataclass looks its fields' annotations up
    # in the module's namespace, where a bare builtin name is not found (docs/install.md).
    payload: builtins.object = None
    id: int = 0
    vtag: float = 0.0
    state: State = State.QUEUED
    dispatched_at: float | None = None
    first: bool = False  # ahead of its tier's fair order (Turbo served Standard for want of supply)

    # Written out, not generated: a compiled build runs a generated dataclass __init__ as interpreted Python.
    def __init__(self, tenant: str, tier: Tier, arrival: float, cost: float = 1.0, payload: builtins.object = None,
                 id: int = 0, vtag: float = 0.0, state: State = _QUEUED, dispatched_at: float | None = None,
                 first: bool = False) -> None:
        self.tenant, self.tier, self.arrival, self.cost, self.payload = tenant, tier, arrival, cost, payload
        self.id, self.vtag, self.state, self.dispatched_at, self.first = id, vtag, state, dispatched_at, first


@dataclass(frozen=True, slots=True)
class Admitted:
    ticket: Ticket


@dataclass(frozen=True, slots=True)
class Shed:
    """A refusal: ``status`` 429 (over the tenant's share or limit) or 503 (the fleet cannot
    take it), with a machine-readable ``reason`` and whole seconds for ``Retry-After``."""

    status: int
    reason: str
    retry_after_s: int
    message: str


def clamp_retry(seconds: float) -> int:
    """Whole seconds for ``Retry-After``: at least 1, at most 60."""
    return int(min(60, max(1, math.ceil(seconds))))


@dataclass(slots=True)
class _TierQueue:
    heap: list[tuple[float, int, Ticket]] = field(default_factory=list)
    length: int = 0
    in_flight: int = 0
    vtime: float = 0.0
    share: float = 0.0  # EWMA of this tier's share of the pool's dispatches while it had requests queued
    share_floor: float = 0.0  # the lowest share falls: one dispatch short of min_share (owed, but by one)
    finish: dict[str, float] = field(default_factory=dict)
    queued_by_tenant: dict[str, int] = field(default_factory=dict)

    def head(self) -> Ticket | None:
        heap = self.heap
        while heap and heap[0][2].state is not _QUEUED:
            heapq.heappop(heap)
        return heap[0][2] if heap else None


class Admission:
    """L1 for one pool.  See the module docstring for the policy."""

    def __init__(
        self,
        tiers: Mapping[Tier, TierPolicy],
        tenants: Mapping[str, TenantPolicy] | None = None,
        *,
        min_samples: int = 5,
        tenant_counts: dict[str, int] | None = None,
        headroom_risk: float = 0.01,
        headroom_staffing: bool = True,
    ) -> None:
        """``tenant_counts`` may be one dict shared by the admissions of several pools, so a
        tenant's ``max_in_flight`` holds across them."""
        self.policies: dict[Tier, TierPolicy] = {t: tiers.get(t, TierPolicy()) for t in TIERS}
        self._queue_limits = {t: p.queue_limit_s for t, p in self.policies.items()}  # (a property: read per submit)
        self.tenants: dict[str, TenantPolicy] = dict(tenants or {})
        self.holdback = True
        self._queues: dict[Tier, _TierQueue] = {t: _TierQueue() for t in TIERS}
        self._order = [(t, self._queues[t], self.policies[t]) for t in TIERS]
        # Per tier, the queues at its rank or above (a request's predicted wait counts them).
        self._at_or_above = {t: tuple(self._queues[u] for u in TIERS[: RANK[t] + 1]) for t in TIERS}
        for _tier, queue, policy in self._order:  # nobody is owed anything before the first dispatch
            queue.share = policy.min_share
            queue.share_floor = policy.min_share * (1.0 - SHARE_ALPHA)
        self._active: dict[str, int] = tenant_counts if tenant_counts is not None else {}
        self._seq = 0
        self.in_flight = 0
        #: Tickets waiting in any tier (read on every arrival and completion: an attribute, not a property).
        self.queued = 0
        self._service_ewma_s = 0.0
        self._samples = 0
        self._min_samples = min_samples
        self.dispatched: dict[Tier, int] = dict.fromkeys(TIERS, 0)
        self.headroom_risk = headroom_risk
        self.headroom_staffing = headroom_staffing
        self._top_arrivals = _Rate()
        self._completions = _Rate()
        self.pace = ArrivalPace()  # follows a surge faster than _top_arrivals (sched/surge.py)
        # Controlled delay for the lower tiers with a TTFT objective (the top tier's excess is
        # downgraded at arrival instead: sched/turbo_supply.py).
        self._codel = {t: ControlledDelay(p.ttft_slo_s, _QUEUED) for t, p in self.policies.items()
                       if p.ttft_slo_s is not None and t is not _TOP}
        self.supply = TurboSupply()
        # A downgraded Turbo request reaches past Turbo's headroom line only when it would
        # otherwise run out Standard's queue limit (its queue timer is Standard's).
        self._first_patience_s = 0.5 * self.policies[TIERS[1]].queue_limit_s

    # ---- queries -------------------------------------------------------------------------
    def queue_length(self, tier: Tier) -> int:
        return self._queues[tier].length

    def tier_in_flight(self, tier: Tier) -> int:
        return self._queues[tier].in_flight

    @property
    def service_estimate_s(self) -> float | None:
        """EWMA of dispatch-to-completion time, once enough requests have completed."""
        return self._service_ewma_s if self._samples >= self._min_samples else None

    def headroom(self, now: float, slots: int) -> int:
        """The slots the holdback keeps for Turbo's bursts right now (0 without holdback)."""
        top_rate = self._top_rate(now, slots)
        if not self._holding(now, top_rate):
            return 0
        return headroom_slots(top_rate, self._replenish_rate(now, slots), self.headroom_risk, slots,
                              self.headroom_staffing)

    def _top_rate(self, now: float, slots: int) -> float:
        """The top tier's rate the holdback is sized for (sched/surge.py ``ArrivalPace``): while the
        lower tiers queue (more than one request), the pool is saturated, so all arrivals come at least as fast as it
        completes, and Turbo's share of them at least that share of its completions."""
        # (More than one: an arrival that finds nothing queued is decided as if alone, sched/flow.py's fused path.)
        saturated = self.queued - self._queues[_TOP].length > 1
        service = self.service_estimate_s if saturated else None
        floor = self.pace.share * slots / service if service else 0.0
        return self.pace.top_rate(now, max(self._top_arrivals.read(now), floor))

    def _turbo_deficit(self, top_rate: float) -> int:
        return turbo_deficit(top_rate, self.service_estimate_s, self._queues[_TOP].in_flight)

    def _holding(self, now: float, top_rate: float) -> bool:
        """Is Turbo being asked for?  Some recent rate (about one request in ``RATE_TAU_S`` /
        2), and not silent for ``QUIET_GAPS`` of its own mean gaps: no headroom for a tier that
        stopped (it would only idle)."""
        if not self.holdback or top_rate * RATE_TAU_S < 0.5:
            return False
        # The gap is measured on the rate as it was at the last arrival: the estimate decays
        # through the silence, and a window drawn on it would widen as the silence goes on.
        arrivals = self._top_arrivals
        return now - arrivals.at <= max(QUIET_MIN_S, QUIET_GAPS / arrivals.value)

    def _replenish_rate(self, now: float, slots: int) -> float:
        """How fast kept-free slots come back: the completions a full pool of ``slots`` makes
        (slots ÷ service time), not the completions seen — those fall as the holdback grows, and
        a reserve sized on them would grow further, a spiral."""
        service = self.service_estimate_s
        if service is not None and service > 0:
            return slots / service
        return self._completions.read(now)

    def snapshot(self) -> dict[str, dict[str, float]]:
        return {
            t.value: {"queued": q.length, "in_flight": q.in_flight, "dispatched": self.dispatched[t],
                      "vtime": q.vtime}
            for t, q in self._queues.items()
        }

    def _tenant(self, name: str) -> TenantPolicy:
        return self.tenants.get(name) or _ANY_TENANT

    # ---- admission -----------------------------------------------------------------------
    def submit(self, ticket: Ticket, now: float, slots: int) -> Admitted | Shed:
        """Queue ``ticket`` or refuse it.  An admitted ticket waits for ``next_dispatch``.
        ``slots`` must be > 0: a pool without any is the caller's answer to give."""
        shed = self._admit(ticket, now, slots)
        if shed is not None:
            return shed
        self._enqueue(ticket)
        return Admitted(ticket)

    def submit_now(self, ticket: Ticket, now: float, slots: int, proven: int | None = None) -> Shed | bool:
        """``submit``, then ``next_dispatch``, fused for the usual arrival: one that finds nothing
        queued, so L1's next choice is this ticket or none.  True: it is dispatched (as
        ``next_dispatch`` would have returned it; the caller must ``requeue`` it if no replica
        can take it), False: it waits queued, or the refusal.  The same decisions and state as
        the two calls, without the heap push and pop or the walk over every tier."""
        shed = self._admit(ticket, now, slots)
        if shed is not None:
            return shed
        if self.queued == 0 and self._goes_alone(ticket.tier, now, slots, proven):
            self._start(ticket, now)
            return True
        self._enqueue(ticket)
        return False

    def _admit(self, ticket: Ticket, now: float, slots: int) -> Shed | None:
        """The refusals of ``submit``; for an admitted ticket, its fair-queueing tag and its
        tenant's count (the caller queues it, or dispatches it at once)."""
        tier = ticket.tier
        policy = self.policies[tier]
        queue = self._queues[tier]
        tenant = self.tenants.get(ticket.tenant) or _ANY_TENANT
        if tier is _TOP:
            self._top_arrivals.add(now)
        self.pace.arrived(tier is _TOP, now)
        active = self._active.get(ticket.tenant, 0)
        if tenant.max_in_flight is not None and active >= tenant.max_in_flight:
            return Shed(429, "tenant_limit", self.retry_after_s(tier, slots),
                        f"tenant has {active} requests in flight, its limit is {tenant.max_in_flight}")
        if queue.length >= policy.queue_bound:
            mine = queue.queued_by_tenant.get(ticket.tenant, 0)
            if mine > 0 and mine >= self._fair_queue_share(queue, ticket.tenant, policy.queue_bound):
                return Shed(429, "tenant_share", self.retry_after_s(tier, slots),
                            f"the {tier.value} queue is full and this tenant holds {mine} of its "
                            f"{policy.queue_bound} places, more than its share")
            return Shed(503, "queue_full", self.retry_after_s(tier, slots),
                        f"the {tier.value} queue is full ({policy.queue_bound} waiting)")
        # Nothing queued and a slot free: the prediction is 0, under any budget (the usual arrival).
        predicted = self.predicted_wait_s(tier, slots) if self.queued or self.in_flight >= slots else None
        if (predicted is not None and predicted > self._queue_limits[tier] and not ticket.first
                and not self._newest_first(tier)):
            return Shed(503, "queue_time_budget", clamp_retry(predicted - policy.queue_limit_s),
                        f"expected queue time {predicted:.1f}s exceeds the {tier.value} budget "
                        f"of {policy.queue_limit_s:g}s")
        self._seq += 1
        ticket.id = self._seq
        ticket.state = _QUEUED
        vtime = queue.vtime
        finish = queue.finish.get(ticket.tenant, 0.0)
        start = finish if finish > vtime else vtime  # (max(), without its call)
        ticket.vtag = start
        cost = 1e-9 if ticket.cost < 1e-9 else ticket.cost  # max(cost, 1e-9), as max() orders it
        weight = 1e-9 if tenant.weight < 1e-9 else tenant.weight
        queue.finish[ticket.tenant] = start + cost / weight
        self._active[ticket.tenant] = active + 1
        return None

    def _newest_first(self, tier: Tier) -> bool:
        """Is ``tier``'s queue standing, or on its way (then a new arrival is served first, whatever
        waits ahead of it, and no FIFO prediction says it must be refused)?"""
        codel = self._codel.get(tier)
        return codel is not None and codel.above_since is not None

    def _enqueue(self, ticket: Ticket) -> None:
        queue = self._queues[ticket.tier]
        heapq.heappush(queue.heap, (-1.0 if ticket.first else ticket.vtag, ticket.id, ticket))
        queue.length += 1
        codel = self._codel.get(ticket.tier)
        if codel is not None:
            codel.joined(ticket, queue.length)
        self.queued += 1
        queue.queued_by_tenant[ticket.tenant] = queue.queued_by_tenant.get(ticket.tenant, 0) + 1

    def _goes_alone(self, tier: Tier, now: float, slots: int, proven: int | None) -> bool:
        """``next_dispatch``'s answer when the only queued ticket is one of ``tier``: with no
        other tier waiting there is no owed turn and no line from a tier above, so it goes while
        the pool is under the tier's holdback line and the tier under its capacity cap."""
        in_flight = self.in_flight
        if in_flight >= slots:
            return False
        policy = self.policies[tier]
        if policy.max_utilization < 1.0:
            top_rate = self._top_rate(now, slots)
            if self._holding(now, top_rate):
                base = slots if proven is None or proven > slots else proven
                ceiling = base - headroom_slots(top_rate, self._replenish_rate(now, base), self.headroom_risk, base,
                                                self.headroom_staffing) - self._turbo_deficit(top_rate)
                if in_flight >= max(1, min(math.floor(policy.max_utilization * base + 1e-9), ceiling)):
                    return False
        return self._queues[tier].in_flight < max(1, math.floor(policy.capacity_share * slots + 1e-9))

    def _fair_queue_share(self, queue: _TierQueue, tenant: str, bound: int) -> float:
        weights = {name: self._tenant(name).weight for name, n in queue.queued_by_tenant.items() if n > 0}
        weights.setdefault(tenant, self._tenant(tenant).weight)
        return bound * weights[tenant] / sum(weights.values())

    def predicted_wait_s(self, tier: Tier, slots: int) -> float | None:
        """Queue time a new ``tier`` request should expect: the work queued at its rank or
        above, drained ``slots`` at a time at the observed service time."""
        if self._samples < self._min_samples or slots <= 0:  # (service_estimate_s is None)
            return None
        service = self._service_ewma_s
        ahead = 0
        for queue in self._at_or_above[tier]:
            ahead += queue.length
        return (ahead + max(0, self.in_flight - slots + 1)) * service / slots

    def retry_after_s(self, tier: Tier, slots: int) -> int:
        """``Retry-After`` for a refused ``tier`` request: the predicted time for the queue
        ahead of it to drain (1 s while there is no service-time estimate yet)."""
        predicted = self.predicted_wait_s(tier, slots)
        return 1 if predicted is None else clamp_retry(predicted)

    # ---- dispatch ------------------------------------------------------------------------
    def next_dispatch(self, now: float, slots: int, proven: int | None = None) -> Ticket | None:
        """The ticket to send upstream now, or ``None`` if none may go.  The caller must later
        call ``on_complete`` (or ``requeue`` if no replica could take it).  ``proven`` is the
        part of ``slots`` the engines have shown they run (``Picker.proven_slots``): holdback
        lines are drawn on it, so the headroom kept for Turbo is real engine capacity."""
        in_flight = self.in_flight
        if in_flight >= slots or self.queued == 0:
            return None
        base = slots if proven is None else min(proven, slots)
        # The most the lower tiers may hold: never more than leaves Turbo its needed headroom.
        ceiling = slots
        top_rate = self._top_rate(now, slots)
        held = self._holding(now, top_rate)
        if held:
            ceiling = base - headroom_slots(top_rate, self._replenish_rate(now, base), self.headroom_risk, base,
                                            self.headroom_staffing) - self._turbo_deficit(top_rate)
        best: Ticket | None = None
        owed: Ticket | None = None
        line_above = 0  # the holdback line of the best tier above with queued work
        for _tier, queue, policy in self._order:
            if queue.length == 0:
                continue
            # Holdback in whole slots, at least one: on a 2-slot pool 85 % keeps one slot free,
            # on a 1-slot pool the tier can still run (epsilon: 0.29 × 100 must give 29, not 28).
            line = slots
            if held and policy.max_utilization < 1.0:
                line = max(1, min(math.floor(policy.max_utilization * base + 1e-9), ceiling))
            due = queue.share < policy.min_share
            cap = max(1, math.floor(policy.capacity_share * slots + 1e-9))
            # An owed tier takes the turn of the tier above it, with that tier's line: it never
            # reaches into headroom kept for a tier that is not waiting.
            # Turbo served Standard for want of supply (``Ticket.first``) goes first in Standard's
            # line, after any Turbo waiting, up to what leaves Turbo its headroom rather than
            # Standard's own utilization line; halfway to Standard's queue limit, as far as Turbo
            # may (sched/turbo_supply.py).
            reach = max(line, line_above) if due else line
            if queue.heap[0][0] < 0.0:
                first = queue.head()
                if first is not None and first.first:
                    reach = slots if now - first.arrival > self._first_patience_s else max(line, ceiling)
            if queue.in_flight < cap and (best is None or due) and in_flight < reach:
                head = queue.head()
                codel = self._codel.get(_tier)
                if codel is not None:
                    head = codel.choose(head, now)
                if head is not None:
                    if due:
                        owed = head
                        break
                    best = head
            line_above = max(line_above, line)
        chosen = owed or best
        if chosen is None:
            return None
        self._take(chosen, now)
        return chosen

    def _take(self, ticket: Ticket, now: float) -> None:
        queue = self._queues[ticket.tier]
        queue.length -= 1
        self.queued -= 1
        self._dec_queued(queue, ticket.tenant)
        if not queue.length and self._codel:
            self._emptied(ticket.tier)
        self._start(ticket, now)

    def _emptied(self, tier: Tier) -> None:
        """``tier``'s queue just emptied: its arrival order (sched/codel.py) holds nothing to keep."""
        codel = self._codel.get(tier)
        if codel is not None:
            codel.order.clear()

    def _start(self, ticket: Ticket, now: float) -> None:
        """``ticket`` leaves for its replica (taken off the queue, or never queued: ``submit_now``)."""
        tier = ticket.tier
        queue = self._queues[tier]
        ticket.state = _DISPATCHED
        ticket.dispatched_at = now
        queue.in_flight += 1
        if ticket.vtag > queue.vtime:
            queue.vtime = ticket.vtag
        self.dispatched[tier] += 1
        if not self.queued:  # (the usual dispatch: no other tier waits, so only this one's share moves)
            queue.share += SHARE_ALPHA * (1.0 - queue.share)
        else:
            self._update_shares(queue)
        self.in_flight += 1
        if len(queue.finish) > 4096:  # forget tenants whose finish tag is already in the past
            queue.finish = {k: v for k, v in queue.finish.items() if v > queue.vtime}

    def _update_shares(self, queue: _TierQueue) -> None:
        """Each tier's recent share of dispatches, after one to ``queue``'s tier."""
        for _other, q, _policy in self._order:
            if q is queue:
                q.share += SHARE_ALPHA * (1.0 - q.share)
            elif q.length:  # a tier with nothing queued is not kept from anything: its share stands
                # Owed by one dispatch at most: a tier kept short for a while (Turbo's backlog
                # while a cold gateway learns its limits) gets its minimum from then on,
                # interleaved with Turbo, not its past shortfall in one block ahead of Turbo.
                share = q.share * (1.0 - SHARE_ALPHA)
                q.share = share if share > q.share_floor else q.share_floor

    @staticmethod
    def _dec_queued(queue: _TierQueue, tenant: str) -> None:
        left = queue.queued_by_tenant.get(tenant, 0) - 1
        if left > 0:
            queue.queued_by_tenant[tenant] = left
        else:
            queue.queued_by_tenant.pop(tenant, None)

    def _release_tenant(self, tenant: str) -> None:
        left = self._active.get(tenant, 0) - 1
        if left > 0:
            self._active[tenant] = left
        else:
            self._active.pop(tenant, None)

    def requeue(self, ticket: Ticket) -> None:
        """Put a dispatched ticket back (no replica could take it); it keeps its place."""
        if ticket.state is not _DISPATCHED:
            return
        queue = self._queues[ticket.tier]
        ticket.state = _QUEUED
        ticket.dispatched_at = None
        queue.in_flight -= 1
        self.in_flight -= 1
        self.dispatched[ticket.tier] -= 1
        queue.length += 1
        self.queued += 1
        queue.queued_by_tenant[ticket.tenant] = queue.queued_by_tenant.get(ticket.tenant, 0) + 1
        heapq.heappush(queue.heap, (-1.0 if ticket.first else ticket.vtag, ticket.id, ticket))

    def on_complete(self, ticket: Ticket, now: float, *, count_service: bool = True) -> None:
        """A dispatched ticket finished (served, failed or cancelled): free its slot."""
        if ticket.state is _DISPATCHED:
            queue = self._queues[ticket.tier]
            queue.in_flight -= 1
            self.in_flight -= 1
            self._completions.add(now)
            if count_service and ticket.dispatched_at is not None:
                sample = max(0.0, now - ticket.dispatched_at)
                self._samples += 1
                alpha = 0.2 if self._samples > 1 else 1.0
                self._service_ewma_s += alpha * (sample - self._service_ewma_s)
            ticket.state = _DONE
            self._release_tenant(ticket.tenant)
        elif ticket.state is _QUEUED:
            self.cancel(ticket)

    def recharge(self, ticket: Ticket, used: float) -> None:
        """Correct the tenant's finish tag from the cost ``ticket`` was charged to the cost it used
        (sched/fair_cost.py), never below the tier's virtual time."""
        queue = self._queues[ticket.tier]
        finish = queue.finish.get(ticket.tenant)
        if finish is None or used == ticket.cost:
            return
        weight = max(self._tenant(ticket.tenant).weight, 1e-9)
        corrected = finish + (used - ticket.cost) / weight
        queue.finish[ticket.tenant] = corrected if corrected > queue.vtime else queue.vtime
        ticket.cost = used

    def cancel(self, ticket: Ticket) -> bool:
        """Withdraw a queued ticket (its client went away, or it waited too long).  True if it
        was queued."""
        if ticket.state is not _QUEUED:
            return False
        queue = self._queues[ticket.tier]
        ticket.state = _DONE
        queue.length -= 1
        self.queued -= 1
        self._dec_queued(queue, ticket.tenant)
        if not queue.length and self._codel:
            self._emptied(ticket.tier)
        self._release_tenant(ticket.tenant)
        return True

    def timed_out(self, ticket: Ticket, now: float, slots: int) -> Shed:
        """Withdraw a ticket that waited past its tier's queue limit and say why; Retry-After is
        the predicted drain time of what is still queued ahead at its rank."""
        self.cancel(ticket)
        limit = self.policies[ticket.tier].queue_limit_s
        return Shed(503, "queue_timeout", self.retry_after_s(ticket.tier, slots),
                    f"waited {now - ticket.arrival:.1f}s in the {ticket.tier.value} queue, over its limit "
                    f"of {limit:g}s")
