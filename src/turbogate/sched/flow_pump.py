"""The flow's pump: every queued request L1 (sched/admission.py) lets go now is sent to the
replica L2 (sched/picker.py) picks for it.  Pure: ``now`` is passed in; called by sched/flow.py
after each event that may free or add a slot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from turbogate.sched.actions import Action, FlowRequest
from turbogate.sched.admission import Ticket
from turbogate.sched.flow_table import FlowEvent
from turbogate.sched.picker import Replica
from turbogate.sched.tiers import Tier

if TYPE_CHECKING:
    from turbogate.sched.flow import Flow, _Pool

_TURBO = Tier.TURBO
_DISPATCH = FlowEvent.DISPATCH

#: How long a queued Turbo request waits for a slot its engine has shown it runs before it may
#: take any slot of a replica still in slow start (``Picker._turbo_room``).
TURBO_SLOW_START_PATIENCE_S = 0.25


def pump(flow: Flow, pool: _Pool, now: float, actions: list[Action],
         counts: tuple[int, int] | None = None) -> list[Action]:
    """Dispatch every queued request L1 lets go now and L2 has a replica for, onto ``actions``.
    ``counts``: the pool's ``Picker.slot_counts`` at ``now`` when the caller has them already."""
    admission = pool.admission
    if admission.queued == 0:
        return actions
    slots, proven = flow.picker.slot_counts(pool.spec.name, now) if counts is None else counts
    admission.learning = flow.picker.learning(pool.spec.name)
    top_only = False
    while True:
        ticket = admission.next_dispatch(now, slots, proven, top_only)
        if ticket is None:
            note_held(flow, pool, now)
            return actions
        replica = pick_for(flow, pool, ticket, now)
        if replica is None:  # L1's slot total says yes, but no single replica has room
            admission.requeue(ticket, just_taken=True)
            # A lower-tier head that L2 holds back (its prefill gate, a replica kept clear for
            # Turbo) does not hold back a queued Turbo request: it goes, if a replica takes it.
            if ticket.tier is _TURBO or admission.queue_length(_TURBO) == 0:
                return actions
            top_only = True
            continue
        req = ticket.payload
        assert isinstance(req, FlowRequest)
        actions.append(flow._dispatch(req, replica, now, _DISPATCH))
        if admission.queued == 0:  # the usual end: next_dispatch would only say None
            return actions


def pump_gate_opened(flow: Flow, pool: _Pool, now: float) -> list[Action]:
    """A lower-tier stream's first token opened its replica's prefill gate (sched/surge.py
    ``prefill_gate``).  A lone request queued behind the gate goes now: nothing else may come to
    send it for a while (at a fifth of capacity a Relax request waited 1 s).  A saturated pool's
    backlog waits for the next arrival or completion instead: sent at the first token, a
    lower-tier prefill would join the very next engine step, every step would hold one, and
    Turbo's prefills would wait them out."""
    admission = pool.admission
    if admission.queued == 0 or admission.saturated():
        return []
    return pump(flow, pool, now, [])


def pick_for(flow: Flow, pool: _Pool, ticket: Ticket, now: float) -> Replica | None:
    """L2's replica for a ticket L1 just let go (``None``: no single replica has room)."""
    turbo = ticket.tier is _TURBO
    beyond = 0  # slots past what a slow-start engine ran that Turbo may take (Picker._turbo_room)
    if turbo:
        admission = pool.admission
        if now - ticket.arrival >= TURBO_SLOW_START_PATIENCE_S:
            beyond = 1 << 30
        elif admission.queued == admission.queue_length(Tier.TURBO):
            beyond = 1
    req = ticket.payload
    # A lower tier keeps a replica clear of its prefills for Turbo where it queues anyway, or a
    # surge is told (sched/surge.py ``keeps_clear``).
    keep_clear = not turbo and pool.admission.pressed()
    return flow.picker.pick(pool.spec.name, now, proven_only=turbo, engine_priority=pool.spec.priority_field,
                            beyond=beyond, prefill_share=req.prefill_share if type(req) is FlowRequest else None,
                            keep_clear=keep_clear)


def note_held(flow: Flow, pool: _Pool, now: float) -> None:
    """L1 just kept a queued request waiting at a holdback line: while a replica is in slow start,
    that is its limit holding traffic back, which slow start must count (Picker.note_held)."""
    admission = pool.admission
    if admission.held_share < 1.0 and admission.learning:
        flow.picker.note_held(pool.spec.name, admission.held_share, now)
