"""The request flow as a pure state machine: a fake clock, no sockets, events in → actions out."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbogate.sched import (
    Cancel,
    Dispatch,
    Failure,
    Flow,
    FlowPolicy,
    FlowRequest,
    HealthChange,
    PickerConfig,
    PoolSpec,
    Probe,
    ReplicaLoad,
    ReplicaSpec,
    Respond,
    ScrapeFailed,
    TenantSpec,
    Tier,
    TierPolicy,
)
from turbogate.sched.flow_table import TRANSITIONS, FlowEvent

ALL_TIERS = frozenset(Tier)
TIERS = {
    Tier.TURBO: TierPolicy(queue_budget_s=5, deadline_s=20),
    Tier.STANDARD: TierPolicy(max_utilization=0.75, queue_budget_s=30, deadline_s=10, min_share=0.2),
    Tier.RELAX: TierPolicy(capacity_share=0.5, max_utilization=0.5, queue_budget_s=60, deadline_s=600,
                           min_share=0.05),
}


def policy(replicas: int = 2, cap: int | None = 2, priority: bool = False, **kw: object) -> FlowPolicy:
    pool = PoolSpec("p", ("m",), tuple(ReplicaSpec(f"r{i}", cap) for i in range(replicas)), priority)
    tenants = (TenantSpec("acme", ALL_TIERS, Tier.STANDARD), TenantSpec("hobby", frozenset({Tier.STANDARD}),
                                                                        Tier.STANDARD))
    picker = PickerConfig(initial_limit=2, eject_after_failures=2, probe_backoff_s=1.0)
    return FlowPolicy(tiers=TIERS, tenants=tenants, pools=(pool,), picker=picker, **kw)  # type: ignore[arg-type]


def fresh(flow: Flow, now: float, **kw: object) -> None:
    """Scrape every replica as idle at ``now`` (fresh metrics, no queue)."""
    for r in flow.picker.replicas():
        flow.scraped(r.id, ReplicaLoad(running=r.in_flight, waiting=0, kv_usage=0.1), now)


def new(flow: Flow, now: float, tier: str | None = None, tenant: str = "acme", **kw: object) -> FlowRequest:
    req = flow.open(tenant=tenant, model="m", tier_body=tier, now=now, **kw)  # type: ignore[arg-type]
    assert isinstance(req, FlowRequest)
    return req


def dispatched(actions: list[object]) -> list[FlowRequest]:
    return [a.req for a in actions if isinstance(a, Dispatch)]


def test_tier_resolution_entitlement_switches_and_priority_field() -> None:
    flow = Flow(policy(priority=True))
    assert new(flow, 0, "priority").served is Tier.TURBO
    assert new(flow, 0, "priority").priority == 0
    denied = new(flow, 0, "turbo", tenant="hobby")
    assert (denied.served, denied.downgrade) == (Tier.STANDARD, "not_entitled")
    by_header = flow.open(tenant="acme", model="m", tier_header="flex", now=0)
    assert isinstance(by_header, FlowRequest) and by_header.served is Tier.RELAX and by_header.priority == 2
    assert new(flow, 0).served is Tier.STANDARD  # the tenant's default
    flow.set_tier(Tier.TURBO, False)
    off = new(flow, 0, "priority")
    assert (off.served, off.downgrade) == (Tier.STANDARD, "tier_disabled")
    assert not flow.turbo_available("acme")
    flow.set_tier(Tier.TURBO, True)
    flow.set_tenant_turbo("acme", False)
    assert new(flow, 0, "priority").downgrade == "tenant_switched_off"
    with pytest.raises(ValueError, match="standard cannot be switched off"):
        flow.set_tier(Tier.STANDARD, False)


def test_bad_tier_word_and_unknown_model_are_4xx_naming_the_field() -> None:
    flow = Flow(policy())
    bad = flow.open(tenant="acme", model="m", tier_body="gold", now=0)
    assert isinstance(bad, Respond) and (bad.status, bad.param) == (400, "service_tier")
    bad = flow.open(tenant="acme", model="m", tier_header="gold", now=0)
    assert isinstance(bad, Respond) and bad.param == "X-Turbogate-Tier"
    missing = flow.open(tenant="acme", model="nope", now=0)
    assert isinstance(missing, Respond) and (missing.status, missing.param) == (404, "model")


def test_cost_is_bounded_so_one_request_cannot_poison_fair_queueing() -> None:
    flow = Flow(policy())
    huge = new(flow, 0, max_tokens=flow.policy.max_cost_tokens, prompt_bytes=10**12)  # more is a 400
    assert huge.cost <= 2 * flow.policy.max_cost_tokens
    assert new(flow, 0, max_tokens=True).cost == flow.policy.default_max_tokens  # a bool is no count


def test_dispatch_queue_and_completion_free_the_next() -> None:
    flow = Flow(policy(replicas=1, cap=2))
    fresh(flow, 0)
    reqs = [new(flow, 0.0, "priority") for _ in range(3)]
    out = [a for r in reqs for a in flow.arrive(r, 0.0)]
    assert dispatched(out) == reqs[:2]
    assert reqs[2].phase.name == "QUEUED"
    assert flow.picker.get("r0").awaiting_first == 2  # two prefills under way
    flow.first_byte(reqs[0], 0.1)
    assert flow.picker.get("r0").awaiting_first == 1
    assert dispatched(flow.finished(reqs[0], 0.5, 200)) == [reqs[2]]
    assert reqs[0].done and reqs[0].status == 200


def test_queue_limit_is_the_budget_or_the_deadline_whichever_first() -> None:
    flow = Flow(policy(replicas=1, cap=1))
    flow.hung.enabled = False  # deadlines alone here: a replica this silent is hung (tests/sched/test_hung.py)
    fresh(flow, 0)
    first, second = new(flow, 0), new(flow, 0)
    flow.arrive(first, 0)
    assert flow.arrive(second, 0) == []  # queued: Standard's budget 30 s, deadline 10 s
    assert flow.wake_at() == pytest.approx(10.0)
    assert flow.tick(9.9) == []
    out = flow.tick(10.0)
    shed = [a for a in out if isinstance(a, Respond)]
    # the queued one is shed; the dispatched one, unanswered, hits the same 10 s deadline
    assert {(a.req.id, a.status, a.code) for a in shed if a.req} == {(second.id, 503, "queue_timeout"),
                                                                      (first.id, 504, "deadline_exceeded")}
    assert all(a.retry_after_s is not None and a.retry_after_s >= 1 for a in shed if a.status == 503)


def test_deadline_cancels_answers_504_and_strikes_the_hung_replica() -> None:
    flow = Flow(policy(replicas=2, cap=4))
    fresh(flow, 0)
    hung = flow.picker.get("r0")
    strikes = 0
    t = 0.0
    while hung.health.value == "healthy":
        assert t < 1000
        req = new(flow, t, stream=True)
        (action,) = flow.arrive(req, t)
        assert isinstance(action, Dispatch)
        if action.replica is not hung:
            flow.first_byte(req, t + 0.01)
            flow.finished(req, t + 0.02)
            t += 0.1
            continue
        out = flow.tick(t + 10.0)  # Standard's deadline: 10 s to the first byte
        assert any(isinstance(a, Cancel) and a.req is req for a in out)
        assert any(isinstance(a, Respond) and a.status == 504 for a in out)
        strikes += 1
        t += 10.0
        fresh(flow, t)
    assert strikes == 2  # eject_after_failures
    req = new(flow, t, stream=True)
    (action,) = flow.arrive(req, t)
    assert isinstance(action, Dispatch) and action.replica.id == "r1"  # no more Turbo or Standard to the hung one


def test_stream_deadline_covers_only_the_first_byte() -> None:
    flow = Flow(policy(replicas=1))
    flow.hung.enabled = False  # deadlines alone here: a replica this silent is hung (tests/sched/test_hung.py)
    fresh(flow, 0)
    req = new(flow, 0, stream=True)
    flow.arrive(req, 0)
    flow.first_byte(req, 1.0)
    assert flow.tick(50.0) == [] or not any(isinstance(a, Respond) for a in flow.tick(50.0))
    assert flow.finished(req, 60.0) is not None and req.status == 200


def test_connect_failure_ejects_and_retries_once_elsewhere() -> None:
    flow = Flow(policy(replicas=2))
    fresh(flow, 0)
    req = new(flow, 0)
    (first,) = flow.arrive(req, 0)
    assert isinstance(first, Dispatch)
    out = flow.failed(req, 0.01, Failure.CONNECT)
    retry = [a for a in out if isinstance(a, Dispatch)]
    assert len(retry) == 1 and retry[0].retry and retry[0].replica is not first.replica
    assert any(isinstance(a, HealthChange) and not a.healthy and "refused" in a.reason for a in out)
    out = flow.failed(req, 0.02, Failure.RESET)
    assert [(a.status, a.code) for a in out if isinstance(a, Respond)] == [(502, "upstream_unavailable")]
    assert all(r.awaiting_first == 0 and r.in_flight == 0 for r in flow.picker.replicas())


def test_no_healthy_replica_is_its_own_503_with_retry_after_the_next_probe() -> None:
    flow = Flow(policy(replicas=1))
    fresh(flow, 0)
    flow.scraped("r0", ScrapeFailed("connect"), 1.0)
    req = new(flow, 1.2)
    (answer,) = flow.arrive(req, 1.2)
    assert isinstance(answer, Respond)
    assert (answer.status, answer.code, answer.retry_after_s) == (503, "no_healthy_replica", 1)
    assert flow.wake_at() == pytest.approx(2.0)
    probes = [a for a in flow.tick(2.0) if isinstance(a, Probe)]
    assert [p.replica.id for p in probes] == ["r0"]
    out = flow.probed("r0", True, 2.1)
    assert any(isinstance(a, HealthChange) and a.healthy for a in out)


def test_client_gone_queued_or_upstream_frees_everything() -> None:
    flow = Flow(policy(replicas=1, cap=1))
    fresh(flow, 0)
    running, queued = new(flow, 0), new(flow, 0)
    flow.arrive(running, 0)
    flow.arrive(queued, 0)
    assert flow.client_gone(queued, 0.5) == []
    out = flow.client_gone(running, 0.6)
    assert [type(a) for a in out] == [Cancel]
    assert flow.picker.get("r0").in_flight == 0 and flow.picker.get("r0").awaiting_first == 0
    _, admission = next(iter(flow.admissions()))
    assert admission.in_flight == 0 and admission.queued == 0


def test_adaptive_limit_shrinks_to_what_the_engine_runs_and_grows_while_it_keeps_up() -> None:
    flow = Flow(policy(replicas=1, cap=None))
    r = flow.picker.get("r0")
    grow_every = flow.policy.picker.grow_every_scrapes
    assert r.limit == 2
    t = 0.0
    while r.limit < 30:  # slow start: the limit is reached, the engine queues nothing → ×1.5
        r.peak_in_flight = int(r.limit)
        t += 1
        flow.scraped("r0", ReplicaLoad(running=r.limit, waiting=0, kv_usage=0.2), t)
    assert t == 7  # 2 × 1.5⁷ ≈ 34: seven scrapes
    r.in_flight = r.peak_in_flight = 30
    # the KV cache full at each queue: the engine's batch stays unknown (sched/concurrency.py), so it probes
    flow.scraped("r0", ReplicaLoad(running=16, waiting=14, kv_usage=0.9), t + 1)
    assert r.limit == 16  # a large queue cuts at once, to what the engine runs of ours: 30 − 14
    assert r.proven == 16
    r.in_flight = 20  # completions lag behind the cut: no second cut for the same queue
    flow.scraped("r0", ReplicaLoad(running=16, waiting=4, kv_usage=0.9), t + 2)
    assert r.limit == 16
    r.in_flight = 16
    for i in range(grow_every - 1):  # at the threshold: one probe now and then
        r.peak_in_flight = 16
        flow.scraped("r0", ReplicaLoad(running=16, waiting=0, kv_usage=0.5), t + 3 + i)
    assert r.limit == 16
    r.peak_in_flight = 16
    flow.scraped("r0", ReplicaLoad(running=16, waiting=0, kv_usage=0.5), t + 3 + grow_every)
    assert r.limit == 17
    r.in_flight = r.peak_in_flight = 17
    flow.scraped("r0", ReplicaLoad(running=16, waiting=1, kv_usage=0.9), t + 4 + grow_every)
    assert r.limit == 17  # one request waiting once: maybe just sent during a step
    flow.scraped("r0", ReplicaLoad(running=16, waiting=1, kv_usage=0.9), t + 5 + grow_every)
    assert r.limit == 16  # seen twice: a real queue
    r.in_flight = 3
    flow.scraped("r0", ReplicaLoad(running=3, waiting=0, kv_usage=0.5), t + 6 + grow_every)
    assert r.limit == 16  # not at the limit since the last scrape: no evidence to grow


def test_turbo_prefers_a_replica_below_what_its_engine_was_seen_running() -> None:
    flow = Flow(policy(replicas=2, cap=None))
    a, b = flow.picker.get("r0"), flow.picker.get("r1")
    for r, running in ((a, 8), (b, 4)):
        r.limit, r.in_flight = 9.0, 0
        flow.scraped(r.id, ReplicaLoad(running=running, waiting=0, kv_usage=0.1), 0.0)
    a.in_flight, b.in_flight = 4, 4  # b is at what its engine has shown it runs; a has room
    assert flow.picker.pick("p", 0.1, proven_only=True) is a
    a.in_flight = 8
    # Both at what their engines ran, both in slow start: with lower tiers queued to push the
    # limits (grow=False) Turbo waits in the gateway, not in an engine's queue past what it ran;
    # alone (grow=True) it takes one slot more, so Turbo-only traffic still grows the limits.
    assert flow.picker.pick("p", 0.1, proven_only=True) is None
    assert flow.picker.pick("p", 0.1, proven_only=True, beyond=1) in (a, b)
    a.in_flight, b.in_flight = 9, 5
    assert flow.picker.pick("p", 0.1, proven_only=True, beyond=1) is None


@pytest.mark.parametrize("mode", ["round-robin", "least-outstanding"])
def test_plain_proxy_baselines_dispatch_everything_at_once(mode: str) -> None:
    flow = Flow(policy(replicas=2, cap=1, mode=mode))
    reqs = [new(flow, 0) for _ in range(6)]
    out = [a for r in reqs for a in flow.arrive(r, 0)]
    assert dispatched(out) == reqs
    assert sorted(r.in_flight for r in flow.picker.replicas()) == [3, 3]


def test_fifo_baseline_ignores_tiers() -> None:
    flow = Flow(policy(replicas=1, cap=1, mode="fifo"))
    fresh(flow, 0)
    first, standard, turbo = new(flow, 0), new(flow, 0.1), new(flow, 0.2, "priority")
    for r in (first, standard, turbo):
        flow.arrive(r, r.arrival)
    assert dispatched(flow.finished(first, 1.0)) == [standard]


def test_turbo_takes_a_probed_slot_when_the_engine_orders_its_queue_by_priority() -> None:
    """Past what an FCFS engine runs, a Turbo request would wait behind lower tiers in the
    engine's FIFO, so it waits in the gateway; an engine on vLLM's priority policy puts it first
    in its own queue, so the probed slot is Turbo's too."""
    flow = Flow(policy(replicas=1, cap=None))
    r = flow.picker.get("r0")
    r.limit, r.ssthresh, r.proven, r.in_flight = 17.0, 16.0, 16.0, 16
    flow.picker.on_metrics(r, ReplicaLoad(running=16, waiting=0, kv_usage=0.5), 0.0)
    assert flow.picker.pick("p", 0.1, proven_only=True) is None
    assert flow.picker.pick("p", 0.1, proven_only=True, engine_priority=True) is r


_EVENT = {"first_byte": FlowEvent.FIRST_BYTE, "finish": FlowEvent.FINISHED, "fail": FlowEvent.FAILED,
          "gone": FlowEvent.CLIENT_GONE}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["arrive", "arrive", "first_byte", "finish", "fail", "gone", "scrape",
                                           "scrape_failed", "probe", "tick"]),
                          st.sampled_from([None, "priority", "default", "flex"]),
                          st.floats(0.0, 3.0), st.integers(0, 7)), max_size=80))
def test_wake_at_comes_nearer_only_when_timers_epoch_grows(
        ops: list[tuple[str, str | None, float, int]]) -> None:
    # The gateway's driver asks wake_at only when timers_epoch changed: between two changes the
    # next due time may only recede (gateway/driver.py), whatever the events in between.
    base = policy(replicas=2, cap=2)
    # A short first-byte watch, so its timers are often the nearest (at the default 60 s never).
    flow = Flow(dataclasses.replace(base, picker=dataclasses.replace(base.picker, slow_first_byte_s=0.5)))
    fresh(flow, 0.0)  # scraped replicas: no health-probe timer hides the requests' own timers
    live: list[FlowRequest] = []
    now = 0.0
    epoch, wake = flow.timers_epoch, flow.wake_at()
    for op, tier, gap, pick in ops:
        now += gap
        replica = flow.picker.replicas()[pick % 2]
        if op == "arrive":
            req = new(flow, now, tier)
            flow.arrive(req, now)
            live.append(req)
        elif op == "scrape":
            flow.scraped(replica.id, ReplicaLoad(running=replica.in_flight, waiting=pick % 3, kv_usage=0.1), now)
        elif op == "scrape_failed":
            flow.scraped(replica.id, ScrapeFailed("connect"), now)
        elif op == "probe":
            flow.probed(replica.id, pick % 2 == 0, now)
        elif op == "tick":
            flow.tick(now)
        elif live:
            req = live[pick % len(live)]
            if (req.phase, _EVENT[op]) not in TRANSITIONS:
                pass  # the flow raises on it (tests/sched/test_flow_transitions.py); a driver never sends it
            elif op == "first_byte":
                flow.first_byte(req, now)
            elif op == "finish":
                flow.finished(req, now, 500 if pick == 7 else 200)
            elif op == "fail" and req.replica is not None:
                flow.failed(req, now, [Failure.CONNECT, Failure.RESET, Failure.BROKEN][pick % 3])
            elif op == "gone":
                flow.client_gone(req, now)
        if flow.timers_epoch == epoch:
            assert flow.wake_at() >= wake, op
        epoch, wake = flow.timers_epoch, flow.wake_at()


def test_a_queued_request_dispatched_at_a_completion_moves_the_timers_epoch() -> None:
    # Its first-byte watch is the nearest due time now: a driver that did not look again would
    # sleep through it (the case the property above reaches only by luck).
    base = policy(replicas=2, cap=2)
    flow = Flow(dataclasses.replace(base, picker=dataclasses.replace(base.picker, slow_first_byte_s=0.5)))
    flow.hung.enabled = False  # deadlines alone here: a replica this silent is hung (tests/sched/test_hung.py)
    fresh(flow, 0.0)
    reqs = [new(flow, 0.0) for _ in range(6)]
    for req in reqs:
        flow.arrive(req, 0.0)
    waiting = [r for r in reqs if r.replica is None]
    assert waiting  # the holdback keeps some queued
    for req in reqs:
        if req.replica is not None:
            flow.first_byte(req, 0.01)
    epoch, wake = flow.timers_epoch, flow.wake_at()
    assert wake == 10.0  # Standard's deadline
    actions = flow.finished(next(r for r in reqs if r.replica is not None), 0.1)
    assert dispatched(actions) == waiting[:1]
    assert flow.wake_at() == 0.6 and flow.timers_epoch != epoch


def test_requests_that_end_in_turn_leave_no_timers_and_need_no_new_look() -> None:
    # The driver asks wake_at only when timers_epoch moves: a timer no nearer than its last
    # answer does not move it, and an ended request's timers go as it ends (not at the next
    # tick, which may be seconds away: they would keep the request alive until then).
    base = policy(replicas=2, cap=2)
    flow = Flow(dataclasses.replace(base, picker=dataclasses.replace(base.picker, slow_first_byte_s=0.5)))
    fresh(flow, 0.0)
    epoch, looks, now = -1, 0, 0.0
    for i in range(300):
        now += 0.01
        req = new(flow, now, "priority" if i % 3 == 0 else None)
        for step, at in ((flow.arrive, now), (flow.first_byte, now + 0.002), (flow.finished, now + 0.004)):
            step(req, at)
            if flow.timers_epoch != epoch:  # as gateway/driver.py's _arm
                epoch, looks = flow.timers_epoch, looks + 1
                flow.wake_at()
        assert req.done
    assert looks <= 4  # the first request of each tier, and the first look: not one a request
    timers = [*flow._deadline_timers.values(), *flow._queue_timers.values(), flow._first_byte_timers]
    assert sum(len(q) for q in timers) == 0


def test_an_unscraped_replica_is_probed_for_health_only_while_idle() -> None:
    """A replica without metrics is probed every health interval, but not while it answers a
    request: its answers show its health, and a probe there can cost one (llama_cpp.server cuts
    the stream it is sending when its /v1/models probe waits for the model's lock)."""
    pool = PoolSpec("p", ("m",), (ReplicaSpec("r0", 2, scraped=False),))
    flow = Flow(FlowPolicy(tiers=TIERS, tenants=(TenantSpec("acme", ALL_TIERS, Tier.STANDARD),), pools=(pool,),
                           picker=PickerConfig(initial_limit=2), health_interval_s=1.0))

    def probes(now: float) -> list[object]:
        return [a for a in flow.tick(now) if isinstance(a, Probe)]

    assert probes(0.0)  # idle: probed
    req = new(flow, 0.5)
    assert dispatched(flow.arrive(req, 0.5)) == [req]
    assert not probes(1.5) and not probes(2.6)  # answering: its answers are the health signal
    flow.first_byte(req, 3.0)
    flow.finished(req, 3.1, 200)
    assert probes(3.7)  # idle again: probed again
