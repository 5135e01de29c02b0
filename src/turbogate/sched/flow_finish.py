"""How a request ends (``Flow._close``): its L1 place freed and its fair-share cost settled,
its timers let go, and its one usage record made and charged to the tenant's Turbo budget.
Pure: ``now`` is passed in; called by sched/flow.py and its timers (sched/flow_timers.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from turbogate.sched.actions import FlowRequest, Phase
from turbogate.sched.fair_cost import settle
from turbogate.sched.flow_table import FlowEvent, move
from turbogate.sched.metering import UsageRecord, cost_units
from turbogate.sched.tiers import TIER_NAME, Tier

if TYPE_CHECKING:
    from turbogate.sched.flow import Flow

_UPSTREAM, _DONE = Phase.UPSTREAM, Phase.DONE
_TURBO = Tier.TURBO


def close(flow: Flow, req: FlowRequest, event: FlowEvent, status: int, now: float, count_service: bool) -> None:
    """``req`` ends with ``status`` because of ``event``; its L1 place is freed (the caller pumps)."""
    flow.hung.forget(req)
    flow._leave_upstream(req)
    move(req, event, _DONE)
    req.status = status
    # Let go of ended requests' timers at the queues' fronts now (wake_at does too, but the
    # driver need not ask it per request): they would keep those requests alive till a tick.
    q = flow._deadline_timers[req.served]
    while q and q[0][1].phase is _DONE:
        q.popleft()
    q = flow._queue_timers[req.served]
    while q and q[0][1].phase is _DONE:
        q.popleft()
    fb = flow._first_byte_timers
    while fb and (fb[0][1].phase is not _UPSTREAM or fb[0][1].replica is not fb[0][2]):
        fb.popleft()
    meter(flow, req, status, now)
    ticket = req.ticket
    if ticket is not None:
        admission = flow.pools[req.pool].admission
        settle(admission, req, flow.policy.max_cost_tokens, now, flow.hung.token_gap(req))
        admission.on_complete(ticket, now, count_service=count_service)
        req.ticket = None  # its payload is req: a cycle left for the GC to find (driver's handle included)


def meter(flow: Flow, req: FlowRequest, status: int, now: float) -> None:
    """The request's one usage record, and its charge against the tenant's Turbo budget."""
    units = cost_units(req.served, req.prompt_tokens, req.completion_tokens, flow.policy.metering)
    start = req.dispatched_at if req.dispatched_at is not None else now
    req.usage = UsageRecord(req.tenant, req.model, TIER_NAME[req.asked], TIER_NAME[req.served], status,
                            req.prompt_tokens, req.completion_tokens, start - req.arrival, now - req.arrival,
                            units, req.downgrade, now)
    if req.served is _TURBO:
        flow.budgets.charge(req.tenant, units)
