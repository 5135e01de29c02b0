"""Turbo leases (sched/leases.py) on a fake clock: the schedule active → warn → expired, renewal,
and the tier the flow serves a request that carries a lease."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turbogate.sched import Flow, FlowPolicy, FlowRequest, PoolSpec, ReplicaSpec, TenantSpec, Tier, TierPolicy
from turbogate.sched.leases import (
    TRANSITIONS,
    LeaseBook,
    LeaseEvent,
    LeaseExpired,
    LeasePolicy,
    LeaseState,
    TooManyLeases,
    UnknownLease,
)


def test_the_table_covers_every_state_and_event_and_expired_is_final() -> None:
    assert set(TRANSITIONS) == set(itertools.product(LeaseState, LeaseEvent))
    assert all(TRANSITIONS[(LeaseState.EXPIRED, e)] is LeaseState.EXPIRED for e in LeaseEvent)


def test_defaults_are_the_documented_schedule() -> None:
    p = LeasePolicy()
    assert (p.duration_s, p.renew_below_s, p.renew_by_s, p.warn_after_s, p.expire_after_s, p.ping_interval_s) == (
        900, 300, 900, 90, 120, 30)


def test_silence_warns_at_90_s_and_expires_at_120_s() -> None:
    book = LeaseBook()
    lease = book.grant("L", "acme", 1000.0)
    assert book.get("L", "acme", 1089.9).state is LeaseState.ACTIVE
    assert book.next_change_at(lease) == 1090.0
    assert book.get("L", "acme", 1090.0).state is LeaseState.WARN
    assert book.check("L", "acme", 1119.9) is None  # warn still serves Turbo
    assert book.get("L", "acme", 1120.0).state is LeaseState.EXPIRED
    assert lease.reason == "no_heartbeat" and lease.expired_at == 1120.0
    assert book.check("L", "acme", 1121.0) == "lease_expired"
    with pytest.raises(LeaseExpired):
        book.heartbeat("L", "acme", 1121.0)


def test_a_late_look_applies_the_events_in_order() -> None:
    book = LeaseBook()
    lease = book.grant("L", "acme", 0.0)
    assert book.get("L", "acme", 5000.0).state is LeaseState.EXPIRED
    assert lease.expired_at == 120.0 and lease.reason == "no_heartbeat"


def test_a_heartbeat_in_warn_brings_it_back_and_pings_every_30_s_keep_it_for_good() -> None:
    book = LeaseBook()
    book.grant("L", "acme", 0.0)
    assert book.get("L", "acme", 100.0).state is LeaseState.WARN
    lease, renewed = book.heartbeat("L", "acme", 100.0)
    assert lease.state is LeaseState.ACTIVE and not renewed
    now = 100.0
    while now < 3 * 3600:
        now += 30.0
        lease, renewed = book.heartbeat("L", "acme", now)
        assert lease.state is LeaseState.ACTIVE
        assert lease.remaining(now) >= 300.0 - 30.0  # renewed by 15 min whenever < 5 min remained
    assert lease.renewals > 0


def test_renewal_adds_15_min_only_when_less_than_5_min_remain() -> None:
    book = LeaseBook()
    book.grant("L", "acme", 0.0)
    t = 0.0
    for t in range(60, 600 + 1, 60):  # heartbeats every minute up to 10 min: 5 min still remain
        lease, renewed = book.heartbeat("L", "acme", float(t))
        assert not renewed and lease.term_ends_at == 900.0
    lease, renewed = book.heartbeat("L", "acme", 660.0)  # 4 min left
    assert renewed and lease.term_ends_at == 1800.0


def test_the_term_runs_out_without_renewal() -> None:
    book = LeaseBook(LeasePolicy(duration_s=100.0, renew_below_s=10.0, renew_by_s=100.0, warn_after_s=90.0,
                                 expire_after_s=120.0))
    book.grant("L", "acme", 0.0)
    book.heartbeat("L", "acme", 80.0)  # 20 s left: not below 10, no renewal
    lease = book.get("L", "acme", 100.0)
    assert lease.state is LeaseState.EXPIRED and lease.reason == "term_over"


def test_another_tenants_lease_is_unknown_and_leases_are_capped() -> None:
    book = LeaseBook(LeasePolicy(max_per_tenant=2, keep_expired_s=10.0))
    book.grant("L1", "acme", 0.0)
    book.grant("L2", "acme", 0.0)
    with pytest.raises(TooManyLeases):
        book.grant("L3", "acme", 1.0)
    with pytest.raises(UnknownLease):
        book.get("L1", "other", 1.0)
    assert book.check("L1", "other", 1.0) == "lease_unknown"
    book.grant("L4", "acme", 121.0)  # L1 and L2 expired at 120 s: room again
    assert book.check("L1", "acme", 125.0) == "lease_expired"
    book.grant("L5", "acme", 131.0)  # past keep_expired_s: the expired ones are forgotten
    assert book.check("L1", "acme", 131.0) == "lease_unknown" and len(book) == 2


def test_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError):
        LeasePolicy(warn_after_s=120.0, expire_after_s=90.0)


def _flow() -> Flow:
    return Flow(FlowPolicy(tiers={t: TierPolicy() for t in Tier},
                           tenants=(TenantSpec("acme", frozenset(Tier), Tier.STANDARD),),
                           pools=(PoolSpec("p", ("m",), (ReplicaSpec("r1"),)),)))


def test_the_flow_serves_turbo_while_the_lease_lives_then_standard_and_says_why() -> None:
    flow = _flow()
    flow.leases.grant("L", "acme", 0.0)
    live = flow.open(tenant="acme", model="m", lease="L", now=60.0)
    assert isinstance(live, FlowRequest) and live.served is Tier.TURBO and live.downgrade is None
    warn = flow.open(tenant="acme", model="m", lease="L", tier_body="flex", now=100.0)
    assert isinstance(warn, FlowRequest) and warn.served is Tier.TURBO
    gone = flow.open(tenant="acme", model="m", lease="L", tier_body="priority", now=120.0)
    assert isinstance(gone, FlowRequest) and gone.asked is Tier.TURBO and gone.served is Tier.STANDARD
    assert gone.downgrade == "lease_expired"
    stranger = flow.open(tenant="acme", model="m", lease="nope", now=1.0)
    assert isinstance(stranger, FlowRequest) and stranger.served is Tier.STANDARD
    assert stranger.downgrade == "lease_unknown"
    plain = flow.open(tenant="acme", model="m", now=130.0)
    assert isinstance(plain, FlowRequest) and plain.served is Tier.STANDARD and plain.downgrade is None


_HALVES = st.integers(0, 400).map(lambda n: n / 2)  # exact in binary: no rounding at the 90 s and 120 s edges


@given(st.lists(_HALVES, min_size=1, max_size=30), _HALVES)
def test_the_state_follows_the_longest_silence(gaps: list[float], after: float) -> None:
    """With a term too long to matter, a lease is expired exactly when some silence (between two
    heartbeats, or since the last) reached 120 s, and in warn when the current one reached 90 s."""
    book = LeaseBook(LeasePolicy(duration_s=1e9))
    book.grant("L", "acme", 0.0)
    now, expired_at = 0.0, None
    for gap in gaps:
        now += gap
        if expired_at is None and gap >= 120.0:
            expired_at = now - gap + 120.0
        if expired_at is None:
            book.heartbeat("L", "acme", now)
        else:
            with pytest.raises(LeaseExpired):
                book.heartbeat("L", "acme", now)
    lease = book.get("L", "acme", now + after)
    if expired_at is None and after >= 120.0:
        expired_at = now + 120.0
    if expired_at is not None:
        assert lease.state is LeaseState.EXPIRED and lease.expired_at == pytest.approx(expired_at)
    else:
        assert lease.state is (LeaseState.WARN if after >= 90.0 else LeaseState.ACTIVE)
