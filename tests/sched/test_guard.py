"""The knee guard's state machine with a fake clock: hysteresis, dwell, the token bucket, the
admin override."""

from __future__ import annotations

import pytest

from turbogate.sched.guard import GuardPolicy, GuardState, KneeGuard, KneeSource

KNEE = 10.0  # req/s


def load(guard: KneeGuard, rps: float, start: float, seconds: float) -> float:
    """Arrivals at ``rps`` for ``seconds``; returns the end time."""
    t = start
    step = 1.0 / rps
    while t < start + seconds:
        guard.observe(t)
        t += step
    return t


def test_states_follow_the_load_with_hysteresis_and_dwell() -> None:
    g = KneeGuard(KneeSource("config", KNEE), GuardPolicy(min_dwell_s=5.0, rate_tau_s=2.0))
    t = load(g, 5, 0, 20)  # half the knee
    assert g.current(t) is GuardState.OPEN
    t = load(g, 9.5, t, 20)  # 0.95×: capped
    assert g.current(t) is GuardState.CAPPED
    t = load(g, 8.5, t, 20)  # 0.85×: between leave (0.8) and enter (0.9): stays capped
    assert g.current(t) is GuardState.CAPPED
    t = load(g, 35, t, 20)  # 3.5×: closed
    assert g.current(t) is GuardState.CLOSED
    t = load(g, 27, t, 20)  # 2.7×: between leave_closed (2.5) and enter_closed (3.0): stays closed
    assert g.current(t) is GuardState.CLOSED
    t = load(g, 9.5, t, 20)
    assert g.current(t) is GuardState.CAPPED
    t = load(g, 4, t, 30)
    assert g.current(t) is GuardState.OPEN
    assert [(e.before, e.after) for e in g.events] == [
        (GuardState.OPEN, GuardState.CAPPED), (GuardState.CAPPED, GuardState.CLOSED),
        (GuardState.CLOSED, GuardState.CAPPED), (GuardState.CAPPED, GuardState.OPEN)]
    assert all("the knee" in e.why for e in g.events)


def test_minimum_dwell_holds_a_state() -> None:
    g = KneeGuard(KneeSource("config", KNEE), GuardPolicy(min_dwell_s=30.0, rate_tau_s=1.0))
    t = load(g, 40, 0, 35)
    assert g.current(t) is GuardState.CLOSED
    entered = g.since
    t = load(g, 2, t, 10)  # the load fell, but the dwell has not passed
    assert g.current(t) is GuardState.CLOSED
    t = load(g, 2, t, entered + 31 - t)
    assert g.current(t) is GuardState.OPEN


def test_capped_grants_turbo_at_the_bucket_rate_and_says_why_for_the_rest() -> None:
    g = KneeGuard(KneeSource("run", KNEE, "runs/x"), GuardPolicy(min_dwell_s=0.0, turbo_share=0.3, burst_s=1.0))
    g.override(GuardState.CAPPED, 0.0)  # pinned, so the test needs no load to keep it there
    granted = sum(g.grant(i * 0.01) is None for i in range(1000))  # 100 Turbo req/s for 10 s
    assert granted == pytest.approx(0.3 * KNEE * 10, abs=2)  # 3 per second get Turbo
    assert "knee_guard_capped" in [g.grant(10.0) for _ in range(3)]  # the bucket is empty at once


def test_closed_serves_all_turbo_standard_and_open_grants_all() -> None:
    g = KneeGuard(KneeSource("planner", KNEE))
    assert g.grant(0.0) is None
    g.override(GuardState.CLOSED, 0.0)
    assert g.grant(0.1) == "knee_guard_closed"


def test_the_admin_override_wins_both_ways_and_is_logged() -> None:
    g = KneeGuard(KneeSource("config", KNEE), GuardPolicy(min_dwell_s=0.0, rate_tau_s=1.0))
    t = load(g, 40, 0, 10)
    assert g.current(t) is GuardState.CLOSED
    g.override(GuardState.OPEN, t)
    assert g.grant(t) is None and g.current(t) is GuardState.OPEN
    t = load(g, 40, t, 1)
    g.override(None, t)
    assert g.current(t) is GuardState.CLOSED
    g.override(GuardState.CLOSED, t + 1)
    t2 = load(g, 1, t + 1, 20)
    assert g.current(t2) is GuardState.CLOSED  # pinned, whatever the load
    assert [e.why for e in g.events if e.why.startswith("admin")] == ["admin override", "admin released the override"]


def test_policy_checks_its_thresholds() -> None:
    with pytest.raises(ValueError, match="thresholds"):
        GuardPolicy(enter_capped=0.7, leave_capped=0.8)


def test_the_flow_serves_turbo_standard_past_the_knee_and_says_why() -> None:
    from turbogate.sched import Flow, FlowPolicy, FlowRequest, PoolSpec, ReplicaSpec, TenantSpec, Tier

    pool = PoolSpec("p", ("m",), (ReplicaSpec("r0"),), knee=KneeSource("config", 2.0))
    flow = Flow(FlowPolicy(tiers={}, tenants=(TenantSpec("t", frozenset(Tier)),), pools=(pool,),
                           guard=GuardPolicy(min_dwell_s=0.0, rate_tau_s=1.0)))
    first = flow.open(tenant="t", model="m", tier_body="priority", now=0.0)
    assert isinstance(first, FlowRequest) and first.served is Tier.TURBO
    reasons = set()
    for i in range(100):  # 20 req/s: ten times the knee
        req = flow.open(tenant="t", model="m", tier_body="priority", now=0.05 * i)
        assert isinstance(req, FlowRequest)
        if req.served is Tier.STANDARD:
            reasons.add(req.downgrade)
    assert reasons == {"knee_guard_capped", "knee_guard_closed"} or reasons == {"knee_guard_closed"}
    assert flow.guards["p"].current(5.0) is GuardState.CLOSED
    later = flow.open(tenant="t", model="m", tier_body="priority", now=30.0)  # the load went away
    assert isinstance(later, FlowRequest) and later.served is Tier.TURBO
