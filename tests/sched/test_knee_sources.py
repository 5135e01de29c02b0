"""Each knee source of the knee guard, with a fake clock and no sockets: a run folder, the
planner, a fixed value, and the online estimate from live signals (issue 11)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gateway.conftest import gateway_config, pool
from tests.plan.test_cli import _fake_run
from turbogate.config import parse_config
from turbogate.configpolicy import flow_policy, knee_source
from turbogate.errors import ConfigError
from turbogate.gateway.cli import with_knee_from
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.plan.knee import predicted_knee
from turbogate.plan.latency import latency_model
from turbogate.results import load_run
from turbogate.sched import Flow, FlowRequest, ReplicaLoad
from turbogate.sched.guard import GuardPolicy, GuardState, KneeGuard, KneeSource
from turbogate.sched.knee_online import OnlineKneePolicy
from turbogate.sched.tiers import Tier

URLS = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]


def config(**pool_extra: Any) -> dict[str, Any]:
    return gateway_config([pool("p", ["m"], URLS, **pool_extra)])


# ---- run folder, planner, fixed ---------------------------------------------------------------


def test_a_run_folder_gives_its_measured_knee(tmp_path: Path) -> None:
    run = _fake_run(tmp_path, scale=1.0, overload=True)
    measured = load_run(run).summary.knee()
    assert measured is not None
    src = knee_source(parse_config(config(knee_from=str(run))).pools[0])
    assert src == KneeSource("run", measured, str(run))
    flat = _fake_run(tmp_path / "flat", scale=1.0)  # never went past the knee
    with pytest.raises(ConfigError, match="found no knee"):
        knee_source(parse_config(config(knee_from=str(flat))).pools[0])
    with pytest.raises(ConfigError, match="cannot read"):
        knee_source(parse_config(config(knee_from=str(tmp_path / "missing"))).pools[0])


def test_the_planner_gives_the_pools_predicted_knee() -> None:
    cfg = parse_config(config(knee_from="plan", plan={"gpu": "L4", "prompt_tokens": 128, "output_tokens": 48,
                                                      "max_num_seqs": 8, "model": "llama-3.1-8b"}))
    src = knee_source(cfg.pools[0])
    assert src is not None and src.kind == "planner"
    per_replica = predicted_knee(latency_model(deployment(get_gpu("L4"), get_model("llama-3.1-8b")), 128, 48, 8), 2.0)
    assert src.knee_rps == pytest.approx(2 * per_replica)  # two replicas in the pool
    assert "2 × L4" in src.detail
    sim_sized = knee_source(cfg.pools[0], replicas=5)  # the simulator's fleet size
    assert sim_sized is not None and sim_sized.knee_rps == pytest.approx(5 * per_replica)
    with pytest.raises(ConfigError, match="needs a plan block"):
        parse_config(config(knee_from="plan"))
    with pytest.raises(ConfigError, match=r"pools\.p\.plan: unknown GPU"):
        knee_source(parse_config(config(knee_from="plan", plan={"gpu": "no-such-gpu"})).pools[0])


def test_fixed_online_and_none() -> None:
    assert knee_source(parse_config(config(knee_rps=7.0)).pools[0]) == KneeSource("config", 7.0)
    bare = parse_config(config()).pools[0]
    assert knee_source(bare) is None
    online = knee_source(bare, online=True)  # knee_guard.online: a pool with no knee learns one
    assert online is not None and online.kind == "online"
    src = knee_source(parse_config(config(knee_from="online")).pools[0])
    assert src is not None and src.kind == "online"
    policy = flow_policy(parse_config(gateway_config([pool("p", ["m"], URLS)], knee_guard={"online": True})))
    assert policy.pools[0].knee is not None and policy.pools[0].knee.kind == "online"


def test_serve_knee_from_fills_pools_without_a_knee_or_replaces_one(tmp_path: Path) -> None:
    cfg = parse_config(gateway_config([pool("a", ["m1"], URLS), pool("b", ["m2"], URLS, knee_rps=3.0)]))
    both = with_knee_from(cfg, ["online"])
    assert [p.knee_from for p in both.pools] == ["online", None] and both.pools[1].knee_rps == 3.0
    one = with_knee_from(cfg, ["b=online"])
    assert one.pools[1].knee_from == "online" and one.pools[1].knee_rps is None and one.pools[0].knee_from is None
    with pytest.raises(ConfigError, match="no pool 'zz'"):
        with_knee_from(cfg, ["zz=online"])
    with pytest.raises(ConfigError, match="needs a plan block"):
        with_knee_from(cfg, ["a=plan"])


# ---- online ------------------------------------------------------------------------------------


class Feed:
    """Drive an ``OnlineKnee`` (through its guard) like a pool: ``rps`` arrivals a second,
    ``done_rps`` completions, every fifth request Turbo with ``ttft`` and ``queue`` seconds."""

    def __init__(self, guard: KneeGuard) -> None:
        self.guard = guard
        self.t = 0.0

    def run(self, seconds: float, rps: float, done_rps: float | None = None, ttft: float = 0.05,
            queue: float = 0.0, kv: float = 0.3, waiting: float = 0.0) -> None:
        g, end = self.guard, self.t + seconds
        done_every = 1.0 / (done_rps if done_rps is not None else rps)
        next_done, next_scrape, i = self.t, self.t, 0
        while self.t < end:
            g.observe(self.t)
            if i % 5 == 0:
                g.dispatched(True, queue, self.t)
                g.first_byte(True, ttft, self.t)
            while next_done <= self.t:
                g.completed(next_done)
                next_done += done_every
            while next_scrape <= self.t:
                g.scraped("r0", kv, waiting)
                next_scrape += 0.5
            i += 1
            self.t += 1.0 / rps
        g.current(self.t)


def online_guard(**online: Any) -> KneeGuard:
    return KneeGuard(KneeSource("online", 0.0), GuardPolicy(min_dwell_s=2.0, rate_tau_s=2.0,
                                                            online=OnlineKneePolicy(**online)))


def test_online_knee_is_unknown_until_the_pool_saturates_then_follows_its_throughput() -> None:
    g = online_guard()
    assert g.online is not None
    feed = Feed(g)
    feed.run(30, rps=8)  # well below the knee: no signal
    assert g.knee(feed.t) is None and g.current(feed.t) is GuardState.OPEN
    assert g.online.ttft_baseline == pytest.approx(0.05)
    # 20 req/s offered, the engines complete 10 and queue the rest.
    feed.run(30, rps=20, done_rps=10, ttft=0.8, queue=0.4, kv=0.97, waiting=6)
    assert g.knee(feed.t) == pytest.approx(10, rel=0.15)
    assert g.current(feed.t) is GuardState.CAPPED  # 2× the learnt knee (closed from 3×)
    why = [e.why for e in g.events]
    assert any("online:" in w and "waiting per engine" in w for w in why)
    desc = g.describe(feed.t)
    assert desc["knee_source"] == "online" and isinstance(desc["online"], dict)
    feed.run(30, rps=4)  # the load went away
    assert g.current(feed.t) is GuardState.OPEN


def test_each_online_signal_alone_marks_the_knee() -> None:
    cases: list[dict[str, float]] = [
        {"ttft": 0.5},  # Turbo TTFT 10× its 50 ms baseline
        {"queue": 0.3},  # Turbo waits at the gateway
        {"kv": 0.99},  # the engines' KV caches are full
        {"waiting": 3.0},  # the engines queue
        {"done_rps": 6.0},  # the pool completes less than it is offered (a slow signal: 20 s rates)
    ]
    for signal in cases:
        g = online_guard()
        feed = Feed(g)
        feed.run(20, rps=10)
        assert g.knee(feed.t) is None, signal
        feed.run(40, rps=10, **signal)
        knee = g.knee(feed.t)
        assert knee is not None and knee <= 10.5, signal
        if "done_rps" in signal:  # counted since the pool went past: its throughput there
            assert knee == pytest.approx(6.0, rel=0.1)
        assert g.online is not None and g.online.reasons, signal


def test_online_knee_rises_when_the_pool_carries_more_without_saturating() -> None:
    g = online_guard()
    feed = Feed(g)
    feed.run(20, rps=10)
    feed.run(10, rps=10, waiting=3.0)  # a burst of engine queueing: knee ≈ 10
    first = g.knee(feed.t)
    assert first is not None and first <= 10.5
    feed.run(20, rps=12)  # then 12 req/s served cleanly while capped: not yet (capping clears signals)
    assert g.current(feed.t) is GuardState.CAPPED and g.knee(feed.t) == first
    feed.run(50, rps=12)  # clear for over capped_raise_after_s (60 s): the knee is at least 12 req/s
    raised = g.knee(feed.t)
    assert raised is not None and raised >= 12 * 1.3 * 0.9
    feed.run(5, rps=12)
    assert g.current(feed.t) is GuardState.OPEN


def test_a_short_blip_does_not_move_the_online_knee() -> None:
    g = online_guard(confirm_s=3.0)
    feed = Feed(g)
    feed.run(20, rps=10)
    feed.run(1.0, rps=10, waiting=5.0)  # one second of queueing, under confirm_s
    feed.run(10, rps=10)
    assert g.knee(feed.t) is None


def test_the_flow_feeds_the_online_knee_from_its_events() -> None:
    cfg = parse_config(gateway_config([pool("p", ["m"], URLS[:1], knee_from="online")]))
    flow = Flow(flow_policy(cfg))
    guard = flow.guards["p"]
    assert guard.online is not None
    req = flow.open(tenant="acme", model="m", tier_body="priority", now=0.0)
    assert isinstance(req, FlowRequest) and req.served is Tier.TURBO
    flow.scraped(URLS[0], ReplicaLoad(running=0, waiting=0, kv_usage=0.0), 0.0)
    flow.arrive(req, 0.0)  # dispatched at once: Turbo queue time 0
    flow.first_byte(req, 0.25)
    flow.finished(req, 1.0)
    flow.scraped(URLS[0], ReplicaLoad(running=3, waiting=4, kv_usage=0.5), 1.5)
    online = guard.online
    assert online.turbo_queue.n == 1 and online.turbo_queue.value == 0.0
    assert online.turbo_ttft.n == 1 and online.turbo_ttft.value == pytest.approx(0.25)
    assert online.achieved.get(1.0) > 0 and online.offered.get(0.0) > 0
    assert online.replicas[URLS[0]] == (0.5, 4)
