"""A request's phases and what moves it between them, as one table (as sched/leases.py's; like
h11, an event its phase does not accept raises instead of passing unnoticed).

Each row: in ``phase``, ``event`` leads to one of ``next`` (the flow's rules pick which).  A row
whose ``next`` is empty is a legal no-op: news the driver can only hear after the flow already
closed the request (a late first byte, finish or failure after a deadline, a hung replica's
cut-off or the client leaving), or a client that leaves twice.  A pair not in the table is a
driver's bug: :class:`IllegalTransition`.

    phase      event        next                 why
    new        arrive       queued | done        L1 takes it to wait its turn, or it is refused
                                                 (a tenant limit, a shed, no healthy replica)
    new        dispatch     upstream             a plain proxy (round-robin, least-outstanding)
                                                 sends it at once
    new        settle       done                 a coalesced follower, answered by its leader's call
    new        client_gone  done
    queued     dispatch     upstream             L1 lets it go and L2 has a replica
    queued     queue_limit  done                 its queue budget (or deadline) passed: shed
    queued     client_gone  done
    upstream   first_byte   answering
    upstream   finished     done                 a whole (non-stream) answer, or an error status
    upstream   failed       upstream | done      the one retry elsewhere, or a 502
    upstream   deadline     done                 504, a strike against the replica
    upstream   requeue      queued               its replica was ejected: back in its line
    upstream   cut          done                 its replica hung and it has no place to go back to
    upstream   client_gone  done
    answering  finished     done
    answering  failed       done                 502: bytes the client has cannot be taken back
    answering  deadline     done                 a whole answer's deadline (a stream's covers its
                                                 first byte only)
    answering  cut          done                 its replica hung mid-answer: 502
    answering  client_gone  done
    done       first_byte, finished, failed,     (no-op) late news of a request already closed
               client_gone, settle
"""

from __future__ import annotations

from enum import IntEnum

from turbogate.errors import TurbogateError
from turbogate.sched.actions import FlowRequest, Phase


class FlowEvent(IntEnum):
    # From the driver:
    ARRIVE = 0
    FIRST_BYTE = 1
    FINISHED = 2
    FAILED = 3
    CLIENT_GONE = 4
    SETTLE = 5  # a coalesced follower's end (its answer was its leader's)
    # The flow's own (its pump, its timers, a hung replica's release):
    DISPATCH = 6
    QUEUE_LIMIT = 7
    DEADLINE = 8
    REQUEUE = 9
    CUT = 10


class IllegalTransition(TurbogateError):
    """An event the request's phase does not accept: the driver fed the flow out of order."""

    def __init__(self, req_id: int, phase: Phase, event: FlowEvent) -> None:
        super().__init__(f"request {req_id}: event {event.name.lower()} is not allowed in phase {phase.name.lower()}")
        self.phase = phase
        self.event = event


_N, _Q, _U, _A, _D = Phase.NEW, Phase.QUEUED, Phase.UPSTREAM, Phase.ANSWERING, Phase.DONE
_E = FlowEvent
#: The whole behaviour (the module docstring reads it row by row): (phase, event) → the phases
#: it may lead to; ``()``: accepted, nothing changes.
TRANSITIONS: dict[tuple[Phase, FlowEvent], tuple[Phase, ...]] = {
    (_N, _E.ARRIVE): (_Q, _D), (_N, _E.DISPATCH): (_U,), (_N, _E.SETTLE): (_D,), (_N, _E.CLIENT_GONE): (_D,),
    (_Q, _E.DISPATCH): (_U,), (_Q, _E.QUEUE_LIMIT): (_D,), (_Q, _E.CLIENT_GONE): (_D,),
    (_U, _E.FIRST_BYTE): (_A,), (_U, _E.FINISHED): (_D,), (_U, _E.FAILED): (_U, _D), (_U, _E.DEADLINE): (_D,),
    (_U, _E.REQUEUE): (_Q,), (_U, _E.CUT): (_D,), (_U, _E.CLIENT_GONE): (_D,),
    (_A, _E.FINISHED): (_D,), (_A, _E.FAILED): (_D,), (_A, _E.DEADLINE): (_D,), (_A, _E.CUT): (_D,),
    (_A, _E.CLIENT_GONE): (_D,),
    (_D, _E.FIRST_BYTE): (), (_D, _E.FINISHED): (), (_D, _E.FAILED): (), (_D, _E.CLIENT_GONE): (),
    (_D, _E.SETTLE): (),
}

_ILLEGAL: tuple[Phase, ...] | None = None
#: The table as rows per event, columns per phase (None: illegal): one list read a lookup.
_LOOKUP: list[list[tuple[Phase, ...] | None]] = [
    [TRANSITIONS.get((phase, event), _ILLEGAL) for phase in Phase] for event in FlowEvent]


def accepts(req: FlowRequest, event: FlowEvent) -> bool:
    """Whether ``event`` changes anything for ``req`` (False: a late event, a legal no-op);
    raises :class:`IllegalTransition` when its phase does not take it at all."""
    allowed = _LOOKUP[event][req.phase]
    if allowed is None:
        raise IllegalTransition(req.id, req.phase, event)
    return len(allowed) > 0


def move(req: FlowRequest, event: FlowEvent, to: Phase) -> None:
    """Put ``req`` in phase ``to`` because of ``event``: the one place a phase changes."""
    allowed = _LOOKUP[event][req.phase]
    if allowed is None or to not in allowed:
        raise IllegalTransition(req.id, req.phase, event)
    req.phase = to
