"""One tier's queue inside L1: its tickets in start-time fair order among tenants.

Tenants share a tier by start-time fair queueing on tokens: a request's tag is ``max(tier
virtual time, tenant's previous finish tag)`` and the tenant's finish tag grows by ``cost /
tenant weight``; the smallest tag goes first.  Costs are bounded by the caller (see
``sched/flow.py``) so one huge request cannot push virtual time out of reach of everyone else.
A ``first`` ticket (Turbo served Standard for want of supply, sched/turbo_supply.py) goes
ahead of the fair order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from turbogate.sched.ticket import State, Ticket

#: Tenants' finish tags kept before those already in the past are forgotten.
FINISH_TAGS_KEPT = 4096
#: The least cost and weight fair queueing divides by.
_TINY = 1e-9
_QUEUED = State.QUEUED


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
