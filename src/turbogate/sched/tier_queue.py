"""One tier's queue inside L1: its tickets in start-time fair order among tenants, and the
holdback line below which it dispatches.

Tenants share a tier by start-time fair queueing on tokens: a request's tag is ``max(tier
virtual time, tenant's previous finish tag)`` and the tenant's finish tag grows by ``cost /
tenant weight``; the smallest tag goes first.  Costs are bounded by the caller (see
``sched/flow.py``) so one huge request cannot push virtual time out of reach of everyone else.
A ``first`` ticket (Turbo served Standard for want of supply, sched/turbo_supply.py) goes
ahead of the fair order.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from turbogate.sched.headroom import Rate, headroom_slots, whole_slots
from turbogate.sched.surge import PACE_WINDOW, RECENT_MARGIN, turbo_deficit, window_rate
from turbogate.sched.ticket import State, Ticket, TierPolicy

#: Tenants' finish tags kept before those already in the past are forgotten.
FINISH_TAGS_KEPT = 4096

#: Weight of one dispatch in each tier's recent-share EWMA (about the last 200 dispatches): long
#: enough that a burst of Turbo, which takes most dispatches for a few seconds, does not make a
#: lower tier owed and let it pass queued Turbo requests (at 50, Turbo's p95 at 2× rose tenfold).
SHARE_ALPHA = 0.005
#: The least cost and weight fair queueing divides by.
_TINY = 1e-9
_QUEUED = State.QUEUED


def holdback_line(policy: TierPolicy, base: int, ceiling: int, top_share: float, kept: int = 0) -> int:
    """The pool's in-flight count below which a tier dispatches while the holdback is on: its
    utilization line on ``base`` slots, no higher than the lower tiers' ``ceiling`` — and, for a
    tier whose line is below the highest lower tier's (``top_share``: Relax under Standard), no
    nearer the ceiling than it is to that line, nor than ``kept`` (the slots the tier above needs
    free for its own arrivals to start at once).  Else a Relax backlog (a burst's, draining for a
    minute) holds the pool at Relax's line, and Standard's arrivals wait for completions
    whenever they come faster than the few slots between the lines absorb."""
    own = whole_slots(policy.max_utilization, base)
    above = whole_slots(top_share, base)
    if own >= above:
        return max(1, min(own, ceiling))
    return max(1, min(own, ceiling - max(above - own, kept)))


def patient_reach(slots: int, reach: int, patient: bool) -> int:
    """The pool's in-flight count below which a Turbo request served Standard for want of supply
    (``Ticket.first``) goes: ``reach`` (the lower tiers' ceiling, so Turbo keeps its headroom), or
    once it is ``patient`` (it waited half of Standard's queue limit, sched/admission.py) half of
    that headroom too, so it is served before the limit refuses it.  Half, not all: the excess
    being served must not leave Turbo's own next arrivals no free slot (reaching every slot, a
    clump of Turbo on the 30 %-Turbo H100 fleet waited 55-100 ms for completions: 5.1x its
    unloaded TTFT in a simulated window)."""
    return slots - (slots - reach) // 2 if patient else reach


#: Standard's room is sized for this share of Turbo's wait risk: Standard is judged on every 4-s
#: window's p95 after a burst (about twenty requests each, some 250 a minute), so one request in
#: a hundred waiting still spoils a few windows a minute; at a tenth, seldom one.
ROOM_RISK_SHARE = 0.1


def room_kept(queue: TierQueue, now: float, base: int, service_s: float, risk: float, staffing: bool) -> int:
    """The slots of ``base`` the tiers below ``queue``'s (Standard's) line leave free for its
    arrivals, sized as Turbo's headroom is (sched/headroom.py, surge.py): room for its swing at
    ``ROOM_RISK_SHARE`` of the wait risk ``risk``, and the slots a dip in its occupancy left,
    which a Relax backlog would fill and hold a whole service time while Standard climbs back."""
    rate = queue.arrival_rate(now)
    return (headroom_slots(rate, base / service_s, ROOM_RISK_SHARE * risk, base, staffing)
            + turbo_deficit(rate, service_s, queue.in_flight))


def count_down(counts: dict[str, int], key: str) -> None:
    """One fewer for ``key``; a key at zero is dropped (a tenant gone leaves nothing behind)."""
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


@dataclass(slots=True)
class TierQueue:
    heap: list[tuple[float, int, Ticket]] = field(default_factory=list)
    length: int = 0
    in_flight: int = 0
    vtime: float = 0.0
    share: float = 0.0  # EWMA of this tier's share of the pool's dispatches while it had requests queued
    share_floor: float = 0.0  # the lowest share falls: one dispatch short of min_share (owed, but by one)
    finish: dict[str, float] = field(default_factory=dict)
    queued_by_tenant: dict[str, int] = field(default_factory=dict)
    #: Arrivals, counted only for the tier the lower tiers leave room for (Standard): a rate
    #: over ``RATE_TAU_S`` and the times of the last few.
    arrivals: Rate = field(default_factory=Rate)
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=PACE_WINDOW))

    def arrived(self, now: float) -> None:
        self.arrivals.add(now)
        self.recent.append(now)

    def arrival_rate(self, now: float) -> float:
        """Arrivals per second: the average, or less once the last few arrivals say the rate
        fell (by ``RECENT_MARGIN``, as surge.py follows Turbo's down): after a burst or an
        overload the average stays high for tens of seconds, and Relax would starve meanwhile."""
        rate, recent = self.arrivals.read(now), window_rate(self.recent, now)
        return rate if recent is None else min(rate, RECENT_MARGIN * recent)

    def head(self) -> Ticket | None:
        """The queued ticket that goes next (tickets that left the queue are dropped lazily)."""
        heap = self.heap
        while heap and heap[0][2].state is not _QUEUED:
            heapq.heappop(heap)
        return heap[0][2] if heap else None

    def tag(self, ticket: Ticket, weight: float) -> None:
        """Give ``ticket`` its fair-queueing tag and move its tenant's finish tag past it."""
        vtime = self.vtime
        finish = self.finish.get(ticket.tenant, 0.0)
        start = finish if finish > vtime else vtime
        ticket.vtag = start
        cost = _TINY if ticket.cost < _TINY else ticket.cost
        self.finish[ticket.tenant] = start + cost / (_TINY if weight < _TINY else weight)

    def recharge(self, ticket: Ticket, used: float, weight: float) -> None:
        """Correct the tenant's finish tag from the cost ``ticket`` was charged to the cost it used
        (sched/fair_cost.py), never below the tier's virtual time."""
        finish = self.finish.get(ticket.tenant)
        if finish is None or used == ticket.cost:
            return
        corrected = finish + (used - ticket.cost) / max(weight, _TINY)
        self.finish[ticket.tenant] = corrected if corrected > self.vtime else self.vtime
        ticket.cost = used

    def push(self, ticket: Ticket) -> None:
        """Queue ``ticket`` at its place: a requeued one keeps the place its tag gave it."""
        heapq.heappush(self.heap, (-1.0 if ticket.first else ticket.vtag, ticket.id, ticket))
        self.length += 1
        self.queued_by_tenant[ticket.tenant] = self.queued_by_tenant.get(ticket.tenant, 0) + 1

    def left(self, tenant: str) -> None:
        """A ticket of ``tenant`` left the queue (dispatched or withdrawn)."""
        self.length -= 1
        count_down(self.queued_by_tenant, tenant)

    def started(self, ticket: Ticket) -> None:
        """``ticket`` of this tier went upstream: virtual time moves to its tag."""
        self.in_flight += 1
        if ticket.vtag > self.vtime:
            self.vtime = ticket.vtag
        if len(self.finish) > FINISH_TAGS_KEPT:  # forget tenants whose finish tag is already in the past
            self.finish = {k: v for k, v in self.finish.items() if v > self.vtime}

    def fair_share(self, tenant: str, bound: int, weight_of: Callable[[str], float]) -> float:
        """``tenant``'s share of ``bound`` places among the tenants queued here, by weight."""
        weights = {name: weight_of(name) for name, n in self.queued_by_tenant.items() if n > 0}
        weights.setdefault(tenant, weight_of(tenant))
        return bound * weights[tenant] / sum(weights.values())


def count_dispatch(queues: Iterable[TierQueue], queue: TierQueue) -> None:
    """Each tier's recent share of dispatches, after one to ``queue``'s tier."""
    for q in queues:
        if q is queue:
            q.share += SHARE_ALPHA * (1.0 - q.share)
        elif q.length:  # a tier with nothing queued is not kept from anything: its share stands
            # Owed by one dispatch at most: a tier kept short for a while (Turbo's backlog
            # while a cold gateway learns its limits) gets its minimum from then on,
            # interleaved with Turbo, not its past shortfall in one block ahead of Turbo.
            share = q.share * (1.0 - SHARE_ALPHA)
            q.share = share if share > q.share_floor else q.share_floor


def undo_dispatch(queues: Iterable[TierQueue], queue: TierQueue) -> None:
    """:func:`count_dispatch` undone, for a take put back at once (no replica had room); the
    other queues' lengths are as they were.  A share held at its floor stays there: owed either way."""
    for q in queues:
        if q is queue:
            q.share = (q.share - SHARE_ALPHA) / (1.0 - SHARE_ALPHA)
        elif q.length and q.share > q.share_floor:
            q.share /= 1.0 - SHARE_ALPHA
