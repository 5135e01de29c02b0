"""Issue 12 rules in the pure flow: max_tokens above the context is refused (naming the field),
and a replica that is timing out is not chosen for Turbo while another can take it."""

from __future__ import annotations

from tests.sched.test_flow import fresh, new, policy
from turbogate.sched import Flow, FlowRequest, Respond
from turbogate.sched.flow import Dispatch


def test_max_tokens_above_the_context_is_400_naming_the_field() -> None:
    flow = Flow(policy(max_cost_tokens=4096))
    for field in ("max_tokens", "max_completion_tokens"):
        bad = flow.open(tenant="acme", model="m", max_tokens=18446744073709551615, max_tokens_field=field, now=0)
        assert isinstance(bad, Respond) and (bad.status, bad.param, bad.code) == (400, field, "invalid_value")
    ok = flow.open(tenant="acme", model="m", max_tokens=4096, now=0)
    assert isinstance(ok, FlowRequest) and ok.cost >= 4096


def test_a_replica_with_a_deadline_strike_is_not_chosen_for_turbo() -> None:
    flow = Flow(policy(replicas=2, cap=4))
    fresh(flow, 0)
    slow = flow.picker.get("r0")
    flow.picker.on_failure(slow, 0.0, hard=False, reason="no first byte within the turbo deadline")
    assert slow.health.value == "healthy"  # one strike does not eject it ...
    room = flow.picker.get("r1").limit
    chosen = []
    for i in range(int(room) + 1):  # ... but Turbo goes elsewhere while the other has room
        actions = flow.arrive(new(flow, 0.1 * i, "priority"), 0.1 * i)
        chosen += [a.replica.id for a in actions if isinstance(a, Dispatch)]
    assert chosen == ["r1"] * int(room) + ["r0"]  # and to it only when no other can take the request
