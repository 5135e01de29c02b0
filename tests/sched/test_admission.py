"""L1 admission: strict precedence with minimum shares, holdback, caps, fairness, bounds and
shedding (pure, no sockets)."""

from __future__ import annotations

import gc
from collections import Counter, deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbogate.sched import Admission, Admitted, Shed, TenantPolicy, Ticket, Tier, TierPolicy
from turbogate.sched.ticket import State

POLICIES = {
    Tier.TURBO: TierPolicy(capacity_share=1.0, max_utilization=1.0, queue_bound=100, queue_budget_s=5),
    Tier.STANDARD: TierPolicy(capacity_share=1.0, max_utilization=0.8, queue_bound=100, queue_budget_s=30),
    Tier.RELAX: TierPolicy(capacity_share=0.5, max_utilization=0.6, queue_bound=100, queue_budget_s=600),
}


def submit(adm: Admission, tier: Tier, now: float, slots: int, tenant: str = "a", cost: float = 1.0) -> Ticket:
    ticket = Ticket(tenant, tier, now, cost)
    assert isinstance(adm.submit(ticket, now, slots), Admitted)
    return ticket


def turbo_active(adm: Admission, now: float, slots: int) -> None:
    """A Turbo request came (and went): the holdback keeps headroom only while Turbo is asked for."""
    adm.cancel(submit(adm, Tier.TURBO, now, slots))


def drain(adm: Admission, now: float, slots: int) -> list[Ticket]:
    out = []
    while (t := adm.next_dispatch(now, slots)) is not None:
        out.append(t)
    return out


def serve_one_at_a_time(adm: Admission, tiers: list[Tier], times: range, slots: int) -> None:
    """At each time, one request of each of ``tiers`` in turn: submitted, dispatched at once, done."""
    for i in times:
        for tier in tiers:
            t = submit(adm, tier, float(i), slots)
            assert adm.next_dispatch(float(i), slots) is t
            adm.on_complete(t, float(i))


def test_turbo_goes_before_older_standard_when_a_slot_frees() -> None:
    adm = Admission(POLICIES)
    slots = 4
    running = [submit(adm, Tier.TURBO, 0.0, slots) for _ in range(4)]
    assert len(drain(adm, 0.0, slots)) == 4
    standard = [submit(adm, Tier.STANDARD, 0.1, slots) for _ in range(3)]
    turbo = submit(adm, Tier.TURBO, 0.5, slots)
    adm.on_complete(running[0], 1.0)
    assert adm.next_dispatch(1.0, slots) is turbo
    assert all(t.state is State.QUEUED for t in standard)


def test_holdback_keeps_headroom_for_turbo_before_saturation() -> None:
    adm = Admission(POLICIES)
    slots = 10
    turbo_active(adm, 0.0, slots)
    for _ in range(20):
        submit(adm, Tier.STANDARD, 0.0, slots)
    sent = drain(adm, 0.0, slots)
    assert len(sent) == 8  # max_utilization 0.8: two slots stay free although 12 wait
    turbo = [submit(adm, Tier.TURBO, 0.1, slots) for _ in range(2)]
    assert drain(adm, 0.1, slots) == turbo


def test_holdback_counts_whole_slots_and_never_blocks_a_one_slot_pool() -> None:
    adm = Admission(POLICIES)
    turbo_active(adm, 0.0, 2)
    for _ in range(5):
        submit(adm, Tier.STANDARD, 0.0, 2)
    assert len(drain(adm, 0.0, 2)) == 1  # 80 % of 2 slots: one stays free for Turbo
    one = Admission(POLICIES)
    submit(one, Tier.RELAX, 0.0, 1)
    assert len(drain(one, 0.0, 1)) == 1


def test_no_headroom_is_kept_while_nobody_asks_for_turbo() -> None:
    adm = Admission(POLICIES)
    for _ in range(40):
        submit(adm, Tier.STANDARD, 0.0, 10)
    running = drain(adm, 0.0, 10)
    assert len(running) == 10  # no Turbo request seen: nothing to keep room for

    def refill(now: float) -> int:
        for t in running:
            adm.on_complete(t, now)
        running[:] = drain(adm, now, 10)
        return len(running)

    turbo_active(adm, 1.0, 10)
    assert refill(1.0) == 8  # Turbo was asked for just now: two slots stay free
    assert refill(31.0) == 10  # half a minute without Turbo: the pool is the others'


def test_headroom_ends_soon_after_turbo_stops() -> None:
    """A stream of 2 Turbo requests/s stops: after ten of its mean gaps (about 6 s on the
    estimate's 1.7/s) the pool is the lower tiers' again, not after its rate estimate decays
    (some 40 s)."""
    adm = Admission(POLICIES)
    slots = 10
    for i in range(41):
        turbo_active(adm, i * 0.5, slots)
    for _ in range(40):
        submit(adm, Tier.STANDARD, 20.0, slots)
    assert len(drain(adm, 20.5, slots)) < slots  # Turbo is being asked for: headroom kept
    assert len(drain(adm, 24.0, slots)) < slots  # 4 s of silence may be a Poisson stream's gap
    assert adm.headroom(27.0, slots) == 0
    assert len(drain(adm, 27.0, slots)) > 0 and adm.in_flight == slots  # 7 s: Turbo stopped


def test_holdback_off_uses_every_slot() -> None:
    adm = Admission(POLICIES)
    adm.holdback = False
    for _ in range(20):
        submit(adm, Tier.STANDARD, 0.0, 10)
    assert len(drain(adm, 0.0, 10)) == 10


def test_capacity_share_caps_a_tier() -> None:
    adm = Admission(POLICIES)
    adm.holdback = False
    for _ in range(20):
        submit(adm, Tier.RELAX, 0.0, 10)
    assert len(drain(adm, 0.0, 10)) == 5


def test_waiting_never_lifts_standard_above_fresh_turbo() -> None:
    adm = Admission(POLICIES)  # no minimum shares
    slots = 2
    running = [submit(adm, Tier.STANDARD, 0.0, slots)]
    drain(adm, 0.0, slots)
    old = submit(adm, Tier.STANDARD, 0.0, slots)
    turbo = submit(adm, Tier.TURBO, 500.0, slots)
    assert adm.next_dispatch(500.0, slots) is turbo  # 500 s of waiting buys no rank
    adm.on_complete(running[0], 501.0)
    adm.on_complete(turbo, 501.0)
    assert adm.next_dispatch(501.0, slots) is old


def test_min_share_guarantees_lower_tiers_their_share_of_dispatches() -> None:
    policies = {**POLICIES, Tier.STANDARD: TierPolicy(max_utilization=0.8, min_share=0.2),
                Tier.RELAX: TierPolicy(capacity_share=0.5, max_utilization=0.6, min_share=0.05)}
    adm = Admission(policies)
    slots = 4
    order: list[Tier] = []
    running: list[Ticket] = []
    for i in range(400):  # every tier always has more queued than the pool can take
        for tier in Tier:
            while adm.queue_length(tier) < 5:
                submit(adm, tier, float(i), slots)
        t = adm.next_dispatch(float(i), slots)
        while t is None:  # free the oldest slot
            live = [x for x in running if x.state is State.DISPATCHED]
            adm.on_complete(live[0], float(i))
            running.remove(live[0])
            t = adm.next_dispatch(float(i), slots)
        running.append(t)
        order.append(t.tier)
    counts = Counter(order)
    assert 0.19 <= counts[Tier.STANDARD] / len(order) <= 0.3  # at least its share, not much more
    assert 0.045 <= counts[Tier.RELAX] / len(order) <= 0.1
    assert counts[Tier.TURBO] > counts[Tier.STANDARD]  # Turbo keeps precedence for the rest


def test_tenants_share_a_tier_fairly_by_tokens() -> None:
    adm = Admission(POLICIES, {"big": TenantPolicy(), "small": TenantPolicy()})
    slots = 1
    for _ in range(50):
        submit(adm, Tier.STANDARD, 0.0, slots, tenant="big", cost=100)
    for _ in range(10):
        submit(adm, Tier.STANDARD, 0.0, slots, tenant="small", cost=100)
    order = []
    for i in range(20):
        t = adm.next_dispatch(float(i), slots)
        assert t is not None
        order.append(t.tenant)
        adm.on_complete(t, float(i) + 0.5)
    assert Counter(order) == {"big": 10, "small": 10}


def test_tenant_weight_sets_its_share() -> None:
    adm = Admission(POLICIES, {"a": TenantPolicy(weight=3), "b": TenantPolicy(weight=1)})
    for tenant in ("a", "b"):
        for _ in range(40):
            submit(adm, Tier.STANDARD, 0.0, 1, tenant=tenant, cost=10)
    order = []
    for i in range(40):
        t = adm.next_dispatch(float(i), 1)
        assert t is not None
        order.append(t.tenant)
        adm.on_complete(t, float(i))
    assert Counter(order)["a"] == 30


def test_full_queue_429_for_the_hog_503_for_others() -> None:
    policies = {**POLICIES, Tier.STANDARD: TierPolicy(queue_bound=4)}
    adm = Admission(policies)
    for _ in range(4):
        submit(adm, Tier.STANDARD, 0.0, 1, tenant="hog")
    drain(adm, 0.0, 1)
    submit(adm, Tier.STANDARD, 0.0, 1, tenant="hog")  # the drained one left a place
    hog = adm.submit(Ticket("hog", Tier.STANDARD, 0.0), 0.0, 1)
    other = adm.submit(Ticket("other", Tier.STANDARD, 0.0), 0.0, 1)
    assert isinstance(hog, Shed) and (hog.status, hog.reason) == (429, "tenant_share")
    assert isinstance(other, Shed) and (other.status, other.reason) == (503, "queue_full")
    assert hog.retry_after_s >= 1 and other.retry_after_s >= 1


def test_tenant_limit() -> None:
    adm = Admission(POLICIES, {"a": TenantPolicy(max_in_flight=2)})
    submit(adm, Tier.STANDARD, 0.0, 5)
    submit(adm, Tier.STANDARD, 0.0, 5)
    over = adm.submit(Ticket("a", Tier.STANDARD, 0.0), 0.0, 5)
    assert isinstance(over, Shed) and over.status == 429 and over.reason == "tenant_limit"


def test_predicted_wait_over_budget_is_shed_503() -> None:
    policies = {**POLICIES, Tier.STANDARD: TierPolicy(queue_budget_s=2.0, max_utilization=1.0)}
    adm = Admission(policies, min_samples=1)
    t = submit(adm, Tier.STANDARD, 0.0, 1)
    assert adm.next_dispatch(0.0, 1) is t
    adm.on_complete(t, 1.0)  # service time 1 s
    for _ in range(3):  # the third still fits: 2 ahead × 1 s = the 2 s budget
        submit(adm, Tier.STANDARD, 1.0, 1)
    shed = adm.submit(Ticket("a", Tier.STANDARD, 1.0), 1.0, 1)
    assert isinstance(shed, Shed) and (shed.status, shed.reason) == (503, "queue_time_budget")
    # Turbo is not behind the Standard queue, so it is still taken.
    assert isinstance(adm.submit(Ticket("a", Tier.TURBO, 1.0), 1.0, 1), Admitted)


def test_timeout_and_cancel_free_their_places() -> None:
    adm = Admission(POLICIES)
    old = submit(adm, Tier.TURBO, 0.0, 1)
    newer = submit(adm, Tier.TURBO, 4.0, 1)
    gone = submit(adm, Tier.TURBO, 4.5, 1)
    assert adm.cancel(gone) and not adm.cancel(gone)
    shed = adm.timed_out(old, 5.5, 1)
    assert (shed.status, shed.reason) == (503, "queue_timeout") and shed.retry_after_s >= 1
    assert adm.queue_length(Tier.TURBO) == 1
    assert adm.next_dispatch(5.5, 1) is newer


def test_requeue_keeps_place() -> None:
    adm = Admission(POLICIES)
    a = submit(adm, Tier.STANDARD, 0.0, 5)
    b = submit(adm, Tier.STANDARD, 0.1, 5)
    assert adm.next_dispatch(0.2, 5) is a
    adm.requeue(a)
    assert adm.in_flight == 0
    assert adm.next_dispatch(0.3, 5) is a
    assert adm.next_dispatch(0.3, 5) is b


@settings(max_examples=40, deadline=None)
@given(share=st.floats(0.02, 0.5), slots=st.integers(1, 8))
def test_relax_is_never_starved_under_a_turbo_and_standard_flood(share: float, slots: int) -> None:
    # Whatever floods the tiers above, a queued Relax head goes within about 1/share dispatches.
    policies = {
        Tier.TURBO: TierPolicy(queue_bound=50),
        Tier.STANDARD: TierPolicy(max_utilization=0.9, queue_bound=50, min_share=0.1),
        Tier.RELAX: TierPolicy(capacity_share=0.2, max_utilization=0.5, queue_bound=10, min_share=share),
    }
    adm = Admission(policies)
    relax = submit(adm, Tier.RELAX, 0.0, slots)
    running: list[Ticket] = []
    for n in range(int(2 / share) + 2 * slots + 2):
        now = float(n)
        for tier in (Tier.TURBO, Tier.STANDARD):
            while adm.queue_length(tier) < slots + 1:
                submit(adm, tier, now, slots, tenant="flood")
        if running:
            adm.on_complete(running.pop(0), now)
        while (t := adm.next_dispatch(now, slots)) is not None:
            running.append(t)
        assert adm.in_flight <= slots
        if relax.state is not State.QUEUED:
            return
    pytest.fail(f"relax still queued after {n} completions (share {share:.2f})")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["submit", "dispatch", "complete", "cancel", "timeout"]),
                          st.sampled_from(list(Tier)), st.sampled_from(["a", "b", "c"])), max_size=120),
       st.integers(1, 6))
def test_nothing_is_lost_and_counts_stay_consistent(ops: list[tuple[str, Tier, str]], slots: int) -> None:
    policies = {t: TierPolicy(queue_bound=5, queue_budget_s=3.0, max_utilization=u, min_share=m)
                for t, m, u in [(Tier.TURBO, 0.0, 1.0), (Tier.STANDARD, 0.2, 0.7), (Tier.RELAX, 0.1, 0.5)]}
    adm = Admission(policies, {"c": TenantPolicy(max_in_flight=3)})
    admitted: list[Ticket] = []
    shed = 0
    expired = 0
    submitted = 0
    for i, (op, tier, tenant) in enumerate(ops):
        now = i * 0.25
        if op == "submit":
            submitted += 1
            r = adm.submit(Ticket(tenant, tier, now), now, slots)
            if isinstance(r, Admitted):
                admitted.append(r.ticket)
            else:
                assert r.status in (429, 503) and r.retry_after_s >= 1
                shed += 1
        elif op == "dispatch":
            adm.next_dispatch(now, slots)
        elif op == "complete":
            live = [t for t in admitted if t.state is State.DISPATCHED]
            if live:
                adm.on_complete(live[0], now)
        elif op == "cancel":
            queued = [t for t in admitted if t.state is State.QUEUED]
            if queued:
                assert adm.cancel(queued[-1])
        else:
            queued = [t for t in admitted if t.state is State.QUEUED]
            if queued:
                adm.timed_out(queued[0], now, slots)
                expired += 1
        assert adm.in_flight <= slots
        assert adm.in_flight == sum(t.state is State.DISPATCHED for t in admitted)
        for t in Tier:
            assert adm.queue_length(t) == sum(x.state is State.QUEUED and x.tier is t for x in admitted)
        assert adm.queued == sum(x.state is State.QUEUED for x in admitted)
    assert submitted == shed + len(admitted)  # every request was either taken or refused with a reason


def test_a_burst_of_turbo_dispatches_does_not_make_standard_owed() -> None:
    """Standard had half the dispatches; then Turbo takes 60 in a row (a burst at 2× overload).
    Its minimum share is a guarantee over a long window: a burst this short must not let queued
    Standard requests pass a queued Turbo one."""
    policies = {**POLICIES, Tier.STANDARD: TierPolicy(max_utilization=0.8, min_share=0.2)}
    adm = Admission(policies)
    slots = 1
    serve_one_at_a_time(adm, [Tier.TURBO, Tier.STANDARD], range(400), slots)  # Standard's share: about 0.5
    serve_one_at_a_time(adm, [Tier.TURBO], range(400, 460), slots)
    submit(adm, Tier.STANDARD, 460.0, slots)
    turbo = submit(adm, Tier.TURBO, 460.0, slots)
    assert adm.next_dispatch(460.0, slots) is turbo


def test_a_spell_of_turbo_alone_does_not_leave_standard_owed() -> None:
    """Turbo alone for a while (nothing of Standard queued: a night's traffic, or the light run
    before a benchmark's overload), then Standard arrives.  Standard was kept from nothing, so
    it is not owed: queued Turbo still goes first."""
    policies = {**POLICIES, Tier.STANDARD: TierPolicy(max_utilization=0.8, min_share=0.2)}
    adm = Admission(policies)
    slots = 1
    serve_one_at_a_time(adm, [Tier.TURBO], range(300), slots)
    submit(adm, Tier.STANDARD, 300.0, slots)
    turbo = submit(adm, Tier.TURBO, 300.0, slots)
    assert adm.next_dispatch(300.0, slots) is turbo


def test_an_owed_tier_gets_its_minimum_interleaved_not_its_shortfall_in_one_block() -> None:
    """Standard is kept short for 200 dispatches (its cap is full while Turbo takes every slot
    that frees), then its requests finish.  From there it gets its minimum share, one dispatch
    in a few, and not every dispatch until its long shortfall is made up while Turbo waits."""
    policies = {**POLICIES, Tier.STANDARD: TierPolicy(capacity_share=0.5, max_utilization=1.0, min_share=0.2)}
    adm = Admission(policies)
    slots = 4
    standard = [submit(adm, Tier.STANDARD, 0.0, slots) for _ in range(2)]
    assert drain(adm, 0.0, slots) == standard  # its cap: half the pool
    for _ in range(10):
        submit(adm, Tier.STANDARD, 0.0, slots)
    running: deque[Ticket] = deque()
    for i in range(200):  # Turbo takes every slot that frees; Standard stays at its cap
        running.append(submit(adm, Tier.TURBO, i * 0.01, slots))
        assert drain(adm, i * 0.01, slots) == [running[-1]]
        if len(running) == 2:
            adm.on_complete(running.popleft(), i * 0.01)
    for t in standard:
        adm.on_complete(t, 2.0)
    order = []
    for i in range(200, 240):  # both tiers always queued; one slot frees at a time
        while adm.queue_length(Tier.TURBO) < 3:
            submit(adm, Tier.TURBO, i * 0.01, slots)
        t = adm.next_dispatch(i * 0.01, slots)
        assert t is not None
        order.append(t.tier)
        adm.on_complete(t, i * 0.01)
    assert order[:10].count(Tier.TURBO) >= 6, order  # no block of Standard ahead of Turbo
    assert 0.2 <= order.count(Tier.STANDARD) / len(order) <= 0.35, order  # and still its minimum


def test_a_finished_ticket_is_not_kept() -> None:
    """L1 holds a ticket only while it queues (and, lazily, until its heap entry surfaces):
    a gateway that runs for months must not keep every request it ever admitted."""
    adm = Admission(POLICIES)
    first = submit(adm, Tier.STANDARD, 0.0, 4)
    assert drain(adm, 0.0, 4) == [first]
    adm.on_complete(first, 1.0)
    for i in range(10):  # later traffic lets the dead heap entry surface
        t = submit(adm, Tier.STANDARD, 2.0 + i, 4)
        assert drain(adm, 2.0 + i, 4) == [t]
        adm.on_complete(t, 3.0 + i)
    containers = [r for r in gc.get_referrers(first) if isinstance(r, (list, tuple, dict, deque))]
    assert not containers  # only this test's own variable refers to it


def test_headroom_covers_turbos_own_swing_unless_a_knee_guard_keeps_it_lean() -> None:
    """Turbo at 6.6 req/s on a 32-slot pool completing 18.3 req/s (service 1.75 s): the
    birth–death chain alone keeps 3 slots at a 5 % risk, but Turbo's in-flight count (mean 11.6,
    about Poisson) swings by more within one service time, while the lower tiers' requests free
    nothing; square-root staffing keeps β √11.6 ≈ 6 (β ≈ 1.74).  A knee-guarded pool keeps the
    chain's only (its guard caps Turbo's load; staffing cost it 11 % of goodput)."""
    from turbogate.sched.headroom import headroom_slots, staffing_beta

    assert staffing_beta(0.05) == pytest.approx(1.74, abs=0.02)
    assert headroom_slots(6.6, 18.3, 0.05, 32) == 6
    assert headroom_slots(6.6, 18.3, 0.05, 32, staffing=False) == 3
    assert headroom_slots(6.6, 18.3, 0.01, 32) > 6  # a smaller risk keeps more
    assert headroom_slots(0.0, 18.3, 0.05, 32) == 0 and headroom_slots(20.0, 18.3, 0.05, 32) == 32


def _state(adm: Admission) -> tuple[object, ...]:
    """Everything a later decision reads (the heap only through its queued heads, as head() does)."""
    queues = adm._queues
    return (adm.snapshot(), adm.in_flight, adm.queued, adm._seq, dict(adm._active), dict(adm.dispatched),
            {t: (q.share, dict(q.finish), {k: v for k, v in q.queued_by_tenant.items() if v}, q.in_flight,
                 None if (h := q.head()) is None else (h.id, h.vtag)) for t, q in queues.items()},
            adm._headroom.arrivals.value, adm._headroom.arrivals.at, adm.service.value, adm.service.samples)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["arrive", "arrive", "arrive", "complete", "complete", "cancel"]),
                          st.sampled_from(list(Tier)), st.sampled_from(["a", "b", "c"]),
                          st.floats(0.0, 2.0), st.integers(0, 3)), max_size=150),
       st.integers(1, 6), st.booleans())
def test_submit_now_decides_and_leaves_state_as_submit_then_next_dispatch(
        ops: list[tuple[str, Tier, str, float, int]], slots: int, proven_short: bool) -> None:
    # The flow's fused path for an arrival that finds nothing queued must be the two calls it
    # replaces, down to the fair-queueing tags, the shares and the holdback's rate estimates.
    policies = {t: TierPolicy(queue_bound=4, queue_budget_s=3.0, max_utilization=u, capacity_share=c, min_share=m)
                for t, m, u, c in [(Tier.TURBO, 0.0, 1.0, 1.0), (Tier.STANDARD, 0.2, 0.7, 0.9),
                                   (Tier.RELAX, 0.1, 0.5, 0.5)]}
    tenants = {"b": TenantPolicy(weight=2.0), "c": TenantPolicy(max_in_flight=3)}
    slow, fused = Admission(policies, tenants, min_samples=2), Admission(policies, tenants, min_samples=2)
    mine: dict[int, tuple[Ticket, Ticket]] = {}  # arrival number -> (slow's ticket, fused's ticket)
    now = 0.0
    for n, (op, tier, tenant, gap, pick) in enumerate(ops):
        now += gap
        proven = max(1, slots - 2) if proven_short else None
        if op == "arrive":
            a, b = Ticket(tenant, tier, now, 1.0 + pick), Ticket(tenant, tier, now, 1.0 + pick)
            empty = slow.queued == 0
            assert empty == (fused.queued == 0)
            decision = slow.submit(a, now, slots)
            if isinstance(decision, Shed):
                expected: object = (decision.status, decision.reason, decision.retry_after_s)
            elif empty:
                went = slow.next_dispatch(now, slots, proven)
                assert went in (None, a)
                expected = went is a
            else:
                expected = "queued"
            got = fused.submit_now(b, now, slots, proven) if empty else fused.submit(b, now, slots)
            if isinstance(got, Shed):
                assert expected == (got.status, got.reason, got.retry_after_s)
            elif isinstance(got, bool):
                assert expected == got
            else:
                assert expected == "queued"
            if not isinstance(decision, Shed):
                mine[n] = (a, b)
        elif op == "complete":
            live = [k for k, (a, _) in mine.items() if a.state is State.DISPATCHED]
            if live:
                a, b = mine[live[pick % len(live)]]
                slow.on_complete(a, now)
                fused.on_complete(b, now)
        else:
            queued = [k for k, (a, _) in mine.items() if a.state is State.QUEUED]
            if queued:
                a, b = mine[queued[pick % len(queued)]]
                assert slow.cancel(a) and fused.cancel(b)
        # Queued work goes the same way on both, one dispatch at a time.
        while (a_next := slow.next_dispatch(now, slots, proven)) is not None:
            b_next = fused.next_dispatch(now, slots, proven)
            assert b_next is not None and (b_next.id, b_next.tier) == (a_next.id, a_next.tier)
        assert fused.next_dispatch(now, slots, proven) is None
        assert _state(slow) == _state(fused)


def test_while_a_limit_is_learnt_the_headroom_stays_within_slow_starts_bar() -> None:
    """A slow start grows once its engine ran ``LOWER_TIERS_BAR`` of its limit, which the lower
    tiers alone must reach: while ``learning``, Turbo's headroom is at most the rest of the slots
    (a wider one stalled slow start above the engine's batch, and Turbo waited for slots no engine
    had: tests/sim/test_turbo_isolation_steady.py)."""
    from turbogate.sched.concurrency import LOWER_TIERS_BAR

    adm = Admission(POLICIES, min_samples=1)
    slots, now, running = 20, 0.0, deque[tuple[float, Ticket]]()
    while now < 30.0:  # Turbo at 2/s, 5 s each: 10 of the 20 slots on average
        ticket = submit(adm, Tier.TURBO, now, slots)
        assert adm.next_dispatch(now, slots) is ticket
        running.append((now + 5.0, ticket))
        while running[0][0] <= now:
            adm.on_complete(running.popleft()[1], now)
        now += 0.5
    bar = int((1.0 - LOWER_TIERS_BAR) * slots + 1e-9)
    learnt = adm.headroom(now, slots)
    assert learnt > bar  # a limit known: the whole headroom for Turbo's swing
    adm.learning = True
    assert adm.headroom(now, slots) == bar


def test_a_pool_still_learning_its_limits_holds_no_tier_at_its_line_while_its_load_is_light() -> None:
    """The utilization lines are drawn on the limits; while slow start has not learnt them they are
    a guess (8 a replica), and a light load that reaches a line is held back for nothing, while
    slow start, growing only on what the engines ran, never learns more.  Turbo's own headroom
    (its ceiling) still holds; under a surge (arrivals × service time past slow start's bar) the
    lines hold again."""
    relax = TierPolicy(capacity_share=1.0, max_utilization=0.6, queue_bound=100, queue_budget_s=600)
    policies = {**POLICIES, Tier.RELAX: relax}
    slots = 20

    def relax_sent(learning: bool, surge: bool) -> int:
        adm = Admission(policies, min_samples=1)
        adm.learning = learning
        running: deque[tuple[float, Ticket]] = deque()
        now = 0.0
        while now < 10.0:  # Turbo at 2/s, 1 s each (the service time measured); Relax queues at 2/s
            ticket = submit(adm, Tier.TURBO, now, slots)
            assert adm.next_dispatch(now, slots) is ticket
            running.append((now + 1.0, ticket))
            while running[0][0] <= now:
                adm.on_complete(running.popleft()[1], now)
            if now >= 3.0:
                submit(adm, Tier.RELAX, now, slots)
            now += 0.5
        if surge:  # 50 more in the last second: 52 arrivals/s × 1 s is past slow start's bar
            for i in range(50):
                submit(adm, Tier.RELAX, now - 1.0 + i / 50, slots)
        return len(drain(adm, now, slots))

    line = int(0.6 * slots) - 2  # Relax's line less the two Turbo requests running
    assert relax_sent(learning=False, surge=False) == line  # limits learnt: the line holds
    assert line < relax_sent(learning=True, surge=False) <= 14  # learning: up to Turbo's ceiling
    assert relax_sent(learning=True, surge=True) <= line  # a surge: the line (or Turbo's ceiling) holds again


def test_an_owed_tier_put_back_for_want_of_a_replica_stays_owed() -> None:
    """Standard is owed and its head is taken, but no replica can take it (L2 holds it back): the
    take is put back.  Standard stays owed, so its head is the next taken; a put-back take that
    counted as a dispatch would let Turbo's backlog pass it until that dispatch decayed.  A ticket
    its replica failed later (``just_taken`` false) keeps its dispatch counted."""
    policies = {**POLICIES, Tier.STANDARD: TierPolicy(max_utilization=1.0, min_share=0.3)}
    adm = Admission(policies)
    slots = 1
    serve_one_at_a_time(adm, [Tier.TURBO, Tier.STANDARD], range(300), slots)  # Standard's share: about 0.8
    standard = submit(adm, Tier.STANDARD, 300.0, slots)
    for i in range(300, 700):  # Turbo takes every dispatch while Standard waits: Standard becomes owed
        t = submit(adm, Tier.TURBO, float(i), slots)
        assert adm.next_dispatch(float(i), slots, top_only=True) is t
        adm.on_complete(t, float(i))
    turbo = submit(adm, Tier.TURBO, 700.0, slots)
    assert adm.next_dispatch(700.0, slots) is standard  # owed: past the queued Turbo request
    adm.requeue(standard, just_taken=True)
    assert adm.next_dispatch(700.0, slots) is standard  # still owed
    adm.requeue(standard)  # as if its replica failed it: the dispatch stays counted
    assert adm.next_dispatch(700.0, slots) is turbo
