"""The flow's transition table (sched/flow_table.py): an event its phase does not accept raises,
a late event after the request closed is a no-op the table lists, and every phase change the
flow makes is one of the table's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.sched.test_flow import fresh, new, policy
from turbogate.errors import TurbogateError
from turbogate.sched import Dispatch, Failure, Flow, FlowRequest, Phase
from turbogate.sched.flow import FlowEvent, IllegalTransition
from turbogate.sched.flow_table import TRANSITIONS
from turbogate.sched.metering import LimitRefusal

#: The events a driver feeds, each as a call on the flow.
DRIVER_EVENTS: dict[FlowEvent, Callable[[Flow, FlowRequest, float], object]] = {
    FlowEvent.ARRIVE: lambda f, r, t: f.arrive(r, t),
    FlowEvent.FIRST_BYTE: lambda f, r, t: f.first_byte(r, t),
    FlowEvent.FINISHED: lambda f, r, t: f.finished(r, t, 200),
    FlowEvent.FAILED: lambda f, r, t: f.failed(r, t, Failure.RESET),
    FlowEvent.CLIENT_GONE: lambda f, r, t: f.client_gone(r, t),
    FlowEvent.SETTLE: lambda f, r, t: f.settle(r, 200, t),
}


def in_phase(phase: Phase) -> tuple[Flow, FlowRequest]:
    """A flow with one request in ``phase`` (one replica of one slot: a second request queues)."""
    flow = Flow(policy(replicas=1, cap=1))
    flow.hung.enabled = False
    fresh(flow, 0.0)
    req = new(flow, 0.0, stream=True)
    if phase is Phase.NEW:
        return flow, req
    if phase is Phase.QUEUED:
        flow.arrive(req, 0.0)
        queued = new(flow, 0.0, stream=True)
        assert flow.arrive(queued, 0.0) == [] and queued.phase is Phase.QUEUED
        return flow, queued
    (dispatch,) = flow.arrive(req, 0.0)
    assert isinstance(dispatch, Dispatch)
    if phase is Phase.ANSWERING:
        flow.first_byte(req, 0.1)
    elif phase is Phase.DONE:
        flow.first_byte(req, 0.1)
        flow.finished(req, 0.2, 200)
    assert req.phase is phase
    return flow, req


def test_the_error_is_a_turbogate_error_naming_the_phase_and_event() -> None:
    flow, req = in_phase(Phase.NEW)
    with pytest.raises(TurbogateError, match="first_byte is not allowed in phase new") as err:
        flow.first_byte(req, 0.1)
    assert isinstance(err.value, IllegalTransition) and err.value.phase is Phase.NEW


@pytest.mark.parametrize("phase", list(Phase), ids=lambda p: p.name.lower())
def test_every_event_a_phase_does_not_accept_raises_and_changes_nothing(phase: Phase) -> None:
    illegal = [e for e in DRIVER_EVENTS if (phase, e) not in TRANSITIONS]
    assert illegal  # every phase refuses something (a second arrive at least)
    for event in illegal:
        flow, req = in_phase(phase)
        replica = flow.picker.get("r0")
        before = (req.status, req.usage, replica.in_flight, req.replica)
        with pytest.raises(IllegalTransition):
            DRIVER_EVENTS[event](flow, req, 0.5)
        assert req.phase is phase and (req.status, req.usage, replica.in_flight, req.replica) == before, event


def test_a_late_event_after_the_close_is_a_listed_no_op() -> None:
    # The races a driver really meets: a finish, failure or first byte that comes after a deadline,
    # a hung replica's cut-off or the client leaving closed the request; a client that leaves twice.
    for event in (FlowEvent.FIRST_BYTE, FlowEvent.FINISHED, FlowEvent.FAILED, FlowEvent.CLIENT_GONE,
                  FlowEvent.SETTLE):
        assert TRANSITIONS[(Phase.DONE, event)] == ()
        flow, req = in_phase(Phase.DONE)
        usage = req.usage
        assert DRIVER_EVENTS[event](flow, req, 9.0) in ([], None)
        assert req.status == 200 and req.usage is usage


def test_a_finish_after_the_deadline_closed_the_request_changes_nothing() -> None:
    flow = Flow(policy(replicas=1, cap=1))
    flow.hung.enabled = False
    fresh(flow, 0.0)
    req = new(flow, 0.0)
    flow.arrive(req, 0.0)
    out = flow.tick(60.0)  # past the Standard deadline (10 s): 504
    assert [(a.status, a.code) for a in out if hasattr(a, "code")] == [(504, "deadline_exceeded")]
    req.prompt_tokens, req.completion_tokens = 5, 7
    assert flow.finished(req, 61.0, 200) == [] and req.status == 504
    assert req.usage is not None and req.usage.status == 504 and req.usage.completion_tokens == 0


def test_each_phase_change_the_flow_makes_is_in_the_table() -> None:
    # Through the rules that move requests: a refusal at arrival, a queue, a dispatch, a retry,
    # a first byte, a finish, a failure mid-answer, a client leaving.
    seen: set[tuple[Phase, Phase]] = set()
    for phase in Phase:
        for event in DRIVER_EVENTS:
            if (phase, event) not in TRANSITIONS:
                continue
            flow, req = in_phase(phase)
            DRIVER_EVENTS[event](flow, req, 0.5)
            steps = TRANSITIONS[(phase, event)]
            then = {to for p in steps for to in TRANSITIONS.get((p, FlowEvent.DISPATCH), ())}  # L1 lets it go
            assert req.phase is phase or req.phase in {*steps, *then}, (phase, event, req.phase)
            seen.add((phase, req.phase))
    flow, req = in_phase(Phase.NEW)
    flow.arrive(req, 0.0, LimitRefusal("tenant_rate_limit", "over", 30))
    assert req.phase is Phase.DONE and req.status == 429
    assert (Phase.UPSTREAM, Phase.ANSWERING) in seen and (Phase.ANSWERING, Phase.DONE) in seen
    assert (Phase.QUEUED, Phase.DONE) in seen and (Phase.NEW, Phase.DONE) in seen


def test_a_failure_after_bytes_reached_the_client_is_a_502_metered_with_what_it_got() -> None:
    flow = Flow(policy(replicas=2))
    flow.hung.enabled = False
    fresh(flow, 0.0)
    req = new(flow, 0.0, stream=True)
    flow.arrive(req, 0.0)
    flow.first_byte(req, 0.1)
    out = flow.failed(req, 0.5, Failure.BROKEN, sent_bytes=900, sent_tokens=12)
    assert [(a.status, a.code) for a in out if hasattr(a, "code")] == [(502, "upstream_error")]
    assert not [a for a in out if isinstance(a, Dispatch)]  # no retry: the client has part of an answer
    assert req.usage is not None and (req.usage.status, req.usage.completion_tokens) == (502, 12)


def test_a_broken_answer_nothing_of_which_reached_the_client_is_retried() -> None:
    flow = Flow(policy(replicas=2))
    flow.hung.enabled = False
    fresh(flow, 0.0)
    req = new(flow, 0.0)
    (first,) = flow.arrive(req, 0.0)
    assert isinstance(first, Dispatch)
    out = flow.failed(req, 0.5, Failure.BROKEN)
    retry = [a for a in out if isinstance(a, Dispatch)]
    assert len(retry) == 1 and retry[0].retry and retry[0].replica is not first.replica
    assert req.phase is Phase.UPSTREAM


def test_the_architecture_doc_lists_the_table_as_the_code_has_it() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    section = doc.split("## The flow's phases: one transition table", 1)[1].split("\n## ", 1)[0]
    listed: dict[tuple[Phase, FlowEvent], tuple[Phase, ...]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] not in {p.name.lower() for p in Phase}:
            continue
        nexts = () if cells[2] == "(no-op)" else tuple(Phase[n.strip().upper()] for n in cells[2].split(","))
        for event in cells[1].split(","):
            listed[(Phase[cells[0].upper()], FlowEvent[event.strip().upper()])] = nexts
    assert listed == TRANSITIONS
