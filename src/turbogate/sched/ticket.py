"""L1's values: the policies admission is given, the ticket it keeps for each request, and its
answers (admitted, or shed with a ``Retry-After``)."""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from enum import Enum

from turbogate.sched.tiers import Tier

__all__ = ["Admitted", "Shed", "State", "TenantPolicy", "Ticket", "TierPolicy", "clamp_retry"]


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """How one tier is admitted and dispatched (sched/admission.py)."""

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


class State(Enum):
    QUEUED = 1
    DISPATCHED = 2
    DONE = 3


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
                 id: int = 0, vtag: float = 0.0, state: State = State.QUEUED, dispatched_at: float | None = None,
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
