"""L3 region arbitration, Turbo's fallback and warm-ups, as pure rules: a fake clock, no sockets."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turbogate.sched import (
    Dispatch,
    Failure,
    Flow,
    FlowPolicy,
    FlowRequest,
    PickerConfig,
    PoolSpec,
    ReplicaLoad,
    ReplicaSpec,
    TenantSpec,
    Tier,
    TierPolicy,
)
from turbogate.sched.regions import (
    NO_TURBO_POOL,
    TURBO_FALLBACK,
    MeasureRtt,
    PoolView,
    RegionPolicy,
    Regions,
    turbo_candidates,
)
from turbogate.sched.warmup import WarmUp

RTT = {"eu": {"eu": 10.0, "us": 90.0}, "us": {"eu": 90.0, "us": 10.0}}


def view(name: str, *, healthy: bool = True, saturated: bool = False, wait: float = 0.0) -> PoolView:
    return PoolView(name, healthy, saturated, wait)


def regions(**kw: object) -> Regions:
    return Regions(RegionPolicy(rtt_ms=RTT, **kw), {"eu-pool": "eu", "us-pool": "us"})  # type: ignore[arg-type]


POOLS = [view("eu-pool"), view("us-pool")]


# ---- estimates -----------------------------------------------------------------------------------
def test_the_configured_leg_ranks_pools_before_any_sample() -> None:
    r = regions()
    assert r.latency_s("eu", "eu-pool") == pytest.approx(0.010)
    assert r.latency_s("eu", "us-pool") == pytest.approx(0.090)
    assert r.choose("eu", None, POOLS, 0).pool == "eu-pool"
    assert r.choose("us", None, POOLS, 0).pool == "us-pool"
    assert r.latency_s("mars", "eu-pool") == 0.0  # no leg known, no sample yet


def test_ewma_of_probes_and_observed_calls() -> None:
    r = regions(alpha=0.5)
    r.probed("eu-pool", 0.100)  # first sample: taken whole, plus the leg
    assert r.latency_s("eu", "eu-pool") == pytest.approx(0.110)
    assert r.latency_s("us", "eu-pool") == pytest.approx(0.190)
    r.probed("eu-pool", 0.300)
    assert r.latency_s("eu", "eu-pool") == pytest.approx(0.210)  # 0.11 + 0.5 × (0.31 − 0.11)
    r.observe("eu", "eu-pool", 0.010)  # a call from eu only moves eu's estimate
    assert r.latency_s("eu", "eu-pool") == pytest.approx(0.115)
    assert r.latency_s("us", "eu-pool") == pytest.approx(0.290)
    r.observe("eu", "eu-pool", math.nan)  # nonsense is ignored
    r.observe("eu", "eu-pool", -1.0)
    assert r.latency_s("eu", "eu-pool") == pytest.approx(0.115)


def test_choice_follows_the_measured_latencies() -> None:
    r = regions(alpha=1.0)
    assert r.choose("eu", None, POOLS, 0).pool == "eu-pool"
    r.probed("eu-pool", 0.200)  # the eu pool got slow: 10 + 200 ms against 90 ms
    r.probed("us-pool", 0.000)
    assert r.choose("eu", None, POOLS, 1).pool == "us-pool"
    r.probed("eu-pool", 0.001)
    assert r.choose("eu", None, POOLS, 2).pool == "eu-pool"


def test_queue_wait_counts_with_latency() -> None:
    r = regions()
    busy_eu = [view("eu-pool", wait=0.5), view("us-pool")]
    assert r.choose("eu", None, busy_eu, 0) == ("us-pool", "best")  # 10 + 500 ms against 90 ms


def test_unhealthy_or_saturated_pools_fail_over_to_the_next_best() -> None:
    r = regions()
    assert r.choose("eu", None, [view("eu-pool", healthy=False), view("us-pool")], 0) == ("us-pool", "failover")
    assert r.choose("eu", None, [view("eu-pool", saturated=True), view("us-pool")], 0) == ("us-pool", "failover")
    assert r.failovers == 2
    # none usable: the best healthy one (L1 queues or sheds it), else the best one (a 503 follows)
    both = [view("eu-pool", saturated=True), view("us-pool", saturated=True)]
    assert r.choose("eu", None, both, 0) == ("eu-pool", "degraded")
    down = [view("eu-pool", healthy=False), view("us-pool", healthy=False, saturated=True)]
    assert r.choose("us", None, down, 0) == ("us-pool", "degraded")


def test_a_session_sticks_for_sticky_s_after_its_last_request() -> None:
    r = regions(sticky_s=60, alpha=1.0)
    s = ("acme", "chat-1")
    assert r.choose("eu", s, POOLS, 0) == ("eu-pool", "best")
    r.probed("eu-pool", 0.5)  # eu is now the worse pool, but the session stays
    assert r.choose("eu", s, POOLS, 50) == ("eu-pool", "sticky")
    assert r.choose("eu", s, POOLS, 100) == ("eu-pool", "sticky")  # 50 s after its last request
    assert r.choose("eu", None, POOLS, 100).pool == "us-pool"  # no session: the best
    assert r.choose("eu", ("other", "chat-1"), POOLS, 100).pool == "us-pool"  # sessions are per tenant
    assert r.choose("eu", s, POOLS, 161) == ("us-pool", "best")  # expired: chosen again, and sticks there
    assert r.choose("eu", s, POOLS, 170) == ("us-pool", "sticky")


def test_a_sticky_pool_that_goes_down_fails_the_session_over() -> None:
    r = regions()
    s = ("acme", "chat-1")
    assert r.choose("eu", s, POOLS, 0).pool == "eu-pool"
    assert r.choose("eu", s, [view("eu-pool", healthy=False), view("us-pool")], 1) == ("us-pool", "failover")
    assert r.choose("eu", s, POOLS, 2) == ("us-pool", "sticky")  # stays on the new pool


def test_sessions_and_client_regions_are_bounded() -> None:
    r = regions(max_sessions=3, max_client_regions=3)
    for i in range(10):
        r.choose("eu", ("acme", str(i)), POOLS, 0)
    assert r.sessions() == 3
    assert r.client(None) == "" and r.client("eu") == "eu"  # the table's regions are known
    assert r.client("x1") == "x1"
    assert r.client("x2") == ""  # the fourth distinct region: counted as the default


def test_alpha_is_checked() -> None:
    with pytest.raises(ValueError, match="alpha"):
        RegionPolicy(alpha=0)


def test_turbo_candidates() -> None:
    capable = {"t": True, "s": False}
    assert turbo_candidates(["t", "s"], capable, {"t": True, "s": True}) == (["t"], None)
    assert turbo_candidates(["t", "s"], capable, {"t": False, "s": True}) == (["s"], TURBO_FALLBACK)
    assert turbo_candidates(["t", "s"], capable, {"t": False, "s": False}) == (["t"], None)  # a 503, not a downgrade
    assert turbo_candidates(["s"], capable, {}) == (["s"], NO_TURBO_POOL)


# ---- in the flow ---------------------------------------------------------------------------------
TIERS = {Tier.TURBO: TierPolicy(queue_budget_s=5, deadline_s=20), Tier.STANDARD: TierPolicy(queue_budget_s=30),
         Tier.RELAX: TierPolicy()}


def flow(*pools: PoolSpec, regions: RegionPolicy | None = None, warmup: bool = False) -> Flow:
    tenants = (TenantSpec("acme", frozenset(Tier), Tier.STANDARD),)
    picker = PickerConfig(initial_limit=2, eject_after_failures=2, probe_backoff_s=1.0)
    return Flow(FlowPolicy(tiers=TIERS, tenants=tenants, pools=pools, picker=picker, regions=regions,
                           warmup=warmup))


def pool(name: str, region: str | None = None, turbo: bool = True, replicas: int = 1) -> PoolSpec:
    return PoolSpec(name, ("m",), tuple(ReplicaSpec(f"{name}/{i}", 4) for i in range(replicas)), region=region,
                    turbo=turbo)


def fresh(f: Flow, now: float) -> None:
    for r in f.picker.replicas():
        if r.health.value == "healthy":
            f.scraped(r.id, ReplicaLoad(running=r.in_flight, waiting=0, kv_usage=0.1), now)


def open_(f: Flow, now: float, **kw: object) -> FlowRequest:
    req = f.open(tenant="acme", model="m", now=now, **kw)  # type: ignore[arg-type]
    assert isinstance(req, FlowRequest)
    return req


def test_flow_picks_the_clients_region_and_learns_from_probes_and_streams() -> None:
    f = flow(pool("eu-pool", "eu"), pool("us-pool", "us"), regions=RegionPolicy(rtt_ms=RTT, alpha=1.0,
                                                                               probe_interval_s=5))
    fresh(f, 0)
    assert f.wake_at() == 0.0  # the first round-trip probes are due
    probes = [a for a in f.tick(0) if isinstance(a, MeasureRtt)]
    assert sorted(p.replica.pool for p in probes) == ["eu-pool", "us-pool"]
    assert f.wake_at() == 5.0
    f.rtt_measured("eu-pool/0", 0.002, 0)
    f.rtt_measured("us-pool/0", 0.002, 0)
    assert open_(f, 1, client_region="eu").pool == "eu-pool"
    assert open_(f, 1, client_region="us").pool == "us-pool"
    # a first byte without headers time (not a stream) teaches nothing: prefill is not distance
    plain = open_(f, 2, client_region="eu")
    f.arrive(plain, 2)
    f.first_byte(plain, 2.9)
    f.finished(plain, 2.9)
    assert open_(f, 2, client_region="eu").pool == "eu-pool"
    # eu's pool answers a stream's headers slowly: 10 + 300 ms against 90 + 2 ms
    req = open_(f, 2, client_region="eu", stream=True)
    assert [a for a in f.arrive(req, 2) if isinstance(a, Dispatch)]
    f.first_byte(req, 2.5, headers_at=2.3)
    f.finished(req, 2.6)
    assert req.client_region == "eu"
    assert f.regions.latency_s("eu", "eu-pool") == pytest.approx(0.310)
    assert open_(f, 3, client_region="eu").pool == "us-pool"
    assert open_(f, 3, client_region="us").pool == "us-pool"


def test_flow_fails_over_when_the_near_pool_is_ejected() -> None:
    f = flow(pool("eu-pool", "eu"), pool("us-pool", "us"), regions=RegionPolicy(rtt_ms=RTT))
    fresh(f, 0)
    req = open_(f, 1, client_region="eu")
    assert req.pool == "eu-pool"
    f.arrive(req, 1)
    f.failed(req, 1.1, Failure.CONNECT)  # refused: eu-pool/0 is ejected (its only replica)
    assert f.picker.healthy("eu-pool") == 0
    assert open_(f, 2, client_region="eu").pool == "us-pool"
    assert f.regions.failovers == 1


def test_no_probes_without_l3() -> None:
    f = flow(pool("p"))
    assert not f.l3 and math.isinf(f.wake_at())
    assert open_(f, 0).pool == "p"


def test_turbo_falls_back_to_the_standard_pool_and_says_so() -> None:
    f = flow(pool("turbo-pool"), pool("std-pool", turbo=False))
    fresh(f, 0)
    turbo = open_(f, 1, tier_body="turbo")
    assert (turbo.pool, turbo.served, turbo.downgrade) == ("turbo-pool", Tier.TURBO, None)
    assert open_(f, 1).pool in ("turbo-pool", "std-pool")  # Standard may use either
    f.arrive(turbo, 1)
    f.failed(turbo, 1.1, Failure.CONNECT)  # the only Turbo replica is ejected
    fallen = open_(f, 2, tier_body="turbo")
    assert (fallen.pool, fallen.served, fallen.downgrade) == ("std-pool", Tier.STANDARD, TURBO_FALLBACK)
    back = f.probed("turbo-pool/0", True, 3)  # it comes back: Turbo is Turbo again
    assert any(c.healthy for c in back if hasattr(c, "healthy"))
    again = open_(f, 4, tier_body="turbo")
    assert (again.pool, again.served, again.downgrade) == ("turbo-pool", Tier.TURBO, None)


def test_a_model_without_turbo_pool_serves_turbo_as_standard() -> None:
    f = flow(pool("std-pool", turbo=False))
    req = open_(f, 0, tier_body="turbo")
    assert (req.served, req.downgrade) == (Tier.STANDARD, NO_TURBO_POOL)


def test_warm_up_when_replicas_join_and_when_one_comes_back() -> None:
    f = flow(pool("p", replicas=2), warmup=True)
    assert f.wake_at() == 0.0
    warm = [a for a in f.tick(0) if isinstance(a, WarmUp)]
    assert sorted(w.replica.id for w in warm) == ["p/0", "p/1"] and {w.model for w in warm} == {"m"}
    assert math.isinf(f.wake_at())  # sent once
    fresh(f, 0)
    req = open_(f, 1)
    f.arrive(req, 1)
    victim = req.replica
    assert victim is not None
    f.failed(req, 1.1, Failure.CONNECT)  # ejected
    assert not [a for a in f.probed(victim.id, False, 2) if isinstance(a, WarmUp)]  # still down: none
    back = [a for a in f.probed(victim.id, True, 3) if isinstance(a, WarmUp)]
    assert [w.replica.id for w in back] == [victim.id]
    assert victim.probation  # /health answered, no request yet
    f.warmed(victim.id, True, 3.2)
    assert not victim.probation and victim.failures == 0  # a good answer: Turbo may use it again


def test_a_failed_warm_up_is_a_strike() -> None:
    f = flow(pool("p"), warmup=True)
    f.tick(0)
    replica = f.picker.get("p/0")
    f.warmed("p/0", False, 1)
    assert replica.failures == 1
    f.warmed("p/0", False, 2)  # eject_after_failures = 2
    assert replica.health.value == "ejected"


def test_no_warm_up_unless_enabled() -> None:
    f = flow(pool("p"))
    assert not [a for a in f.tick(0) if isinstance(a, WarmUp)]


# ---- properties ----------------------------------------------------------------------------------
_VIEW = st.builds(lambda healthy, saturated, wait: (healthy, saturated, wait), st.booleans(), st.booleans(),
                  st.floats(0, 2))
_STEP = st.tuples(st.sampled_from(["eu", "us", "ap"]), st.sampled_from([None, "s1", "s2"]),
                  st.lists(_VIEW, min_size=2, max_size=2), st.floats(0, 0.5), st.floats(0, 5))


@given(st.lists(_STEP, min_size=1, max_size=30))
def test_choice_never_takes_an_unusable_pool_while_a_usable_one_exists(
        steps: list[tuple[str, str | None, list[tuple[bool, bool, float]], float, float]]) -> None:
    r = regions(sticky_s=2)
    now = 0.0
    for client, session, raw, rtt, dt in steps:
        now += dt
        views = [PoolView(name, h, s, w) for name, (h, s, w) in zip(("eu-pool", "us-pool"), raw, strict=True)]
        r.probed("eu-pool", rtt)
        choice = r.choose(client, ("acme", session) if session else None, views, now)
        usable = {v.name for v in views if v.healthy and not v.saturated}
        if usable:
            assert choice.pool in usable
            assert choice.how in ("best", "failover", "sticky")
        else:
            assert choice.how == "degraded"
            healthy = {v.name for v in views if v.healthy}
            assert not healthy or choice.pool in healthy
