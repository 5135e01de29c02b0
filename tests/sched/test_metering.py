"""Metering, Turbo budgets and tenant limits as pure rules: a fake clock, no store, no sockets."""

from __future__ import annotations

import calendar
import dataclasses

import pytest

from tests.sched.test_flow import fresh, new, policy
from turbogate.sched import Dispatch, Flow, FlowPolicy, PoolSpec, ReplicaSpec, Respond, TenantSpec, Tier
from turbogate.sched.metering import (
    BUDGET_SPENT,
    BudgetBook,
    LimitPolicy,
    MeteringPolicy,
    cost_units,
    limit_refusal,
    period_key,
    period_start,
)


def test_every_close_leaves_one_record_at_the_tier_served() -> None:
    flow = Flow(policy(metering=MeteringPolicy(turbo_cost_multiple=3.0)))
    fresh(flow, 0.0)
    req = new(flow, 0.0, "turbo")
    actions = flow.arrive(req, 0.0)
    assert any(isinstance(a, Dispatch) for a in actions)
    req.prompt_tokens, req.completion_tokens = 10, 5
    flow.finished(req, 0.5, 200)
    rec = req.usage
    assert rec is not None
    assert (rec.tenant, rec.tier_asked, rec.tier_served, rec.status) == ("acme", "turbo", "turbo", 200)
    assert rec.cost_units == 45.0 and rec.latency_s == 0.5 and rec.queue_s == 0.0
    gone = new(flow, 1.0)
    flow.arrive(gone, 1.0)
    flow.client_gone(gone, 1.2)
    assert gone.usage is not None and gone.usage.status == 499 and gone.usage.cost_units == 0.0


def test_a_refused_request_is_metered_too() -> None:
    flow = Flow(policy(replicas=1))
    for r in flow.picker.replicas():  # no scrape yet: fresh() would make it healthy; eject it instead
        flow.picker.on_failure(r, 0.0, hard=True, reason="test")
        flow.picker.on_failure(r, 0.0, hard=True, reason="test")
    req = new(flow, 0.0)
    out = flow.arrive(req, 0.0)
    assert isinstance(out[0], Respond) and out[0].status == 503
    assert req.usage is not None and req.usage.status == 503 and req.usage.tier_served == "standard"


def test_spent_budget_serves_turbo_as_standard_and_says_why() -> None:
    base = policy()
    tenants = (TenantSpec("acme", frozenset(Tier), Tier.STANDARD, turbo_budget=100.0, budget_period="day"),)
    flow = Flow(FlowPolicy(tiers=base.tiers, tenants=tenants, pools=base.pools, picker=base.picker))
    fresh(flow, 0.0)
    t = 0.0
    served = []
    while len(served) < 10:
        req = new(flow, t, "turbo")
        flow.arrive(req, t)
        req.prompt_tokens, req.completion_tokens = 10, 20  # 30 tokens × 2 = 60 units per Turbo request
        flow.finished(req, t + 0.1, 200)
        served.append((req.served, req.downgrade))
        t += 0.2
    assert served[:2] == [(Tier.TURBO, None)] * 2  # 0 and 60 spent: both under 100
    assert set(served[2:]) == {(Tier.STANDARD, BUDGET_SPENT)}
    assert flow.budgets.describe("acme")["spent_units"] == 120.0  # Standard costs nothing against it
    flow.budgets.roll("acme", "day:next")  # a new period starts from zero
    req = new(flow, t, "turbo")
    assert req.served is Tier.TURBO


def test_only_a_record_charging_a_real_budget_must_reach_the_store_first() -> None:
    base = policy()
    tenants = (TenantSpec("acme", frozenset(Tier), Tier.STANDARD, turbo_budget=100.0, budget_period="day"),
               TenantSpec("free", frozenset(Tier), Tier.STANDARD))
    flow = Flow(FlowPolicy(tiers=base.tiers, tenants=tenants, pools=base.pools, picker=base.picker))
    fresh(flow, 0.0)
    records = {}
    for tenant, tier in (("acme", "turbo"), ("acme", "standard"), ("free", "turbo")):
        req = new(flow, 0.0, tier, tenant=tenant)
        flow.arrive(req, 0.0)
        req.prompt_tokens, req.completion_tokens = 10, 20
        flow.finished(req, 0.1, 200)
        assert req.usage is not None
        records[tenant, tier] = req.usage
    book = flow.budgets
    assert book.spends_budget(records["acme", "turbo"])
    assert not book.spends_budget(records["acme", "standard"])  # Standard charges no budget
    assert not book.spends_budget(records["free", "turbo"])  # Turbo, but its tenant has no budget to keep
    book.set_budget("free", 50.0, "day")  # a budget set later (admin API) counts from then on
    assert book.spends_budget(records["free", "turbo"])
    book.set_budget("free", None, "day")  # and lifted: unlimited again
    assert not book.spends_budget(records["free", "turbo"])


def test_knee_guard_downgrade_is_metered_at_the_tier_served() -> None:
    from turbogate.sched.guard import KneeSource

    base = policy()
    pool = PoolSpec("p", ("m",), (ReplicaSpec("r0", 2),), knee=KneeSource("config", 1.0))
    flow = Flow(FlowPolicy(tiers=base.tiers, tenants=base.tenants, pools=(pool,), picker=base.picker))
    fresh(flow, 0.0)
    forced = next(iter(flow.guards.values()))
    from turbogate.sched.guard import GuardState

    forced.override(GuardState.CLOSED, 0.0)
    req = new(flow, 0.0, "turbo")
    assert req.served is Tier.STANDARD
    flow.arrive(req, 0.0)
    req.prompt_tokens, req.completion_tokens = 1, 1
    flow.finished(req, 0.1, 200)
    assert req.usage is not None and req.usage.tier_served == "standard" and req.usage.cost_units == 2.0
    assert req.usage.downgrade == req.downgrade is not None


def test_cost_units_per_tier() -> None:
    p = MeteringPolicy(turbo_cost_multiple=2.5, relax_cost_multiple=0.5)
    assert cost_units(Tier.TURBO, 3, 1, p) == 10.0
    assert cost_units(Tier.STANDARD, 3, 1, p) == 4.0
    assert cost_units(Tier.RELAX, 3, 1, p) == 2.0


def test_periods_reset_on_schedule() -> None:
    ts = calendar.timegm((2026, 11, 26, 15, 30, 5))  # a Thursday
    assert period_start(ts, "hour") == calendar.timegm((2026, 11, 26, 15, 0, 0))
    assert period_start(ts, "day") == calendar.timegm((2026, 11, 26, 0, 0, 0))
    assert period_start(ts, "week") == calendar.timegm((2026, 11, 23, 0, 0, 0))  # Monday
    assert period_start(ts, "month") == calendar.timegm((2026, 11, 1, 0, 0, 0))
    assert period_key(ts, "day") == "day:2026-11-26"
    assert period_key(ts, "day") != period_key(ts + 86400, "day")
    with pytest.raises(ValueError, match="fortnight"):
        period_start(ts, "fortnight")


def test_a_budget_rolls_to_the_period_the_wall_clock_is_in() -> None:
    book = BudgetBook()
    assert book.start_period("acme", 0.0) is None  # no budget: nothing to roll
    book.set_budget("acme", 100.0, "day")
    monday = calendar.timegm((2026, 11, 23, 10, 0, 0))
    key = book.start_period("acme", monday)
    assert key == period_key(monday, "day")
    book.observe("acme", key, 60.0)
    assert book.start_period("acme", monday + 3600) == key and book.budgets["acme"].spent == 60.0  # same day
    tuesday = book.start_period("acme", monday + 86400)
    assert tuesday != key and book.budgets["acme"].spent == 0.0  # a new day starts from zero


def test_store_totals_count_only_for_the_current_period_of_a_budgets_kind() -> None:
    book = BudgetBook()
    book.set_budget("acme", 100.0, "day")
    now = calendar.timegm((2026, 11, 26, 15, 30, 5))
    book.start_period("acme", now)
    yesterday = period_key(now - 86400, "day")
    book.observe_spent({("acme", period_key(now, "day")): 40.0, ("acme", yesterday): 99.0,
                        ("acme", period_key(now, "month")): 500.0, ("basic", period_key(now, "day")): 7.0}, now)
    assert book.budgets["acme"].spent == 40.0 and "basic" not in book.budgets


def test_limit_rule() -> None:
    lim = LimitPolicy(max_in_flight=2, requests_per_minute=10, tokens_per_minute=100)
    assert limit_refusal(lim, 1, 9, 99, 30.0) is None
    assert limit_refusal(lim, 2, 0, 0, 30.0).code == "tenant_limit"  # type: ignore[union-attr]
    r = limit_refusal(lim, 0, 10, 0, 30.0)
    assert r is not None and r.code == "tenant_rate_limit" and r.retry_after_s == 31
    assert limit_refusal(lim, 0, 0, 100, 59.5).code == "tenant_token_limit"  # type: ignore[union-attr]
    assert not LimitPolicy().any



def test_the_simulator_spends_turbo_budgets_like_the_gateway() -> None:
    """sim/ runs the same flow with the engine's tokens on each request, so a Turbo budget runs out there too."""
    from tests.sim.helpers import gateway_data, sim_config
    from turbogate.config import parse_config
    from turbogate.sim.run import simulate

    data = gateway_data()
    data["tenants"][0].update(turbo_budget_units=2000, budget_period="day")  # ~ 5 Turbo requests of (138 + 48) × 2
    sc = sim_config(qps=2.0, duration=30.0, tiers="turbo=1.0")
    sc = dataclasses.replace(sc, gateway=parse_config(data))
    records = simulate(sc).records
    turbo = [r for r in records if r.tier_served == "turbo"]
    assert 5 <= len(turbo) <= 12  # the budget, overshot only by the requests running when it ran out
    assert any(r.tier_asked == "turbo" and r.tier_served == "standard" for r in records)
