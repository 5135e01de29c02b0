"""Issue 12 rules in the pure flow: max_tokens above the context is refused (naming the field),
a replica that is timing out is not chosen for Turbo while another can take it, and a first byte
slower than ``slow_first_byte_s`` is a strike (a hung replica is ejected before the deadline)."""

from __future__ import annotations

from dataclasses import replace

from tests.sched.test_flow import fresh, new, policy
from turbogate.sched import Flow, FlowRequest, Respond
from turbogate.sched.actions import Dispatch
from turbogate.sched.picker import Health, HealthChange, Picker, PickerConfig, Replica


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


def test_a_slow_first_byte_is_a_strike_and_a_hung_replica_is_ejected_before_the_deadline() -> None:
    flow = Flow(replace(policy(replicas=2, cap=4), picker=PickerConfig(
        initial_limit=4, eject_after_failures=2, slow_first_byte_s=5.0, probe_backoff_s=1.0)))
    fresh(flow, 0)
    hung, good = flow.picker.get("r0"), flow.picker.get("r1")
    reqs = [new(flow, 0.0) for _ in range(4)]
    sent = {r.id: d.replica.id for r in reqs for d in flow.arrive(r, 0.0) if isinstance(d, Dispatch)}
    on_good = [r for r in reqs if sent[r.id] == "r1"]
    on_hung = [r for r in reqs if sent[r.id] == "r0"]
    assert len(on_hung) >= 2
    for r in on_good:  # the good replica answers at once
        flow.first_byte(r, 0.5)
        flow.finished(r, 0.6)
    assert flow.wake_at() <= 5.0  # before the tier deadline (10 s here)
    actions = flow.tick(5.0)
    assert hung.health.value == "ejected" and good.health.value == "healthy"
    assert any(isinstance(a, HealthChange) and not a.healthy and a.replica is hung for a in actions)
    assert all(not r.done for r in on_hung)  # the strikes do not end them: their deadline still rules
    assert good.failures == 0


def test_a_first_byte_in_time_is_no_strike() -> None:
    flow = Flow(replace(policy(replicas=1, cap=4), picker=PickerConfig(initial_limit=4, slow_first_byte_s=5.0)))
    fresh(flow, 0)
    req = new(flow, 0.0)
    flow.arrive(req, 0.0)
    flow.first_byte(req, 4.0)
    flow.tick(5.0)
    assert flow.picker.get("r0").failures == 0


def test_ejected_again_on_probation_the_backoff_keeps_doubling() -> None:
    picker = Picker(PickerConfig(eject_after_failures=2, probe_backoff_s=1.0, probe_backoff_max_s=8.0))
    r = Replica(id="r", pool="p", cap=4)
    picker.add(r)
    backoffs = []
    now = 0.0
    for _ in range(5):  # a hung engine: its /health answers, its requests never do
        while r.health is Health.HEALTHY:
            picker.on_dispatch(r)
            picker.on_failure(r, now, hard=False, reason="deadline")
        backoffs.append(r.backoff_s)
        now = r.next_probe_at
        picker.on_probe(r, True, now)
        assert r.failures == 1  # back on probation: one more failure ejects it
    assert backoffs == [1.0, 2.0, 4.0, 8.0, 8.0]
    picker.on_dispatch(r)
    picker.on_response(r, 200, 0.1, now)  # a good answer ends the probation
    picker.on_failure(r, now, hard=False, reason="x")
    picker.on_failure(r, now, hard=False, reason="x")
    assert r.health is Health.EJECTED and r.backoff_s == 1.0
