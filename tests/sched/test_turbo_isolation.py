"""Turbo keeps its latency at 2× overload with the default policy (issue 19), in the pure core.

A fake clock and a toy engine per replica (``max_num_seqs`` slots, a FIFO queue behind them,
a fixed prefill and decode time) stand in for real engines; the flow is the real one, with the
default tier policy from ``turbogate.config`` and no ``max_concurrency`` anywhere.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from turbogate.config import parse_config
from turbogate.configpolicy import flow_policy
from turbogate.sched import Dispatch, Flow, FlowRequest, PoolSpec, ReplicaLoad, ReplicaSpec, Respond, Tier

PREFILL_S = 0.02
DECODE_S = 1.5
SEQS = 16
STEP_S = 0.012  # an engine admits waiting requests only at step boundaries, as vLLM does


@dataclass
class ToyEngine:
    running: int = 0
    waiting: deque[FlowRequest] = field(default_factory=deque)


@dataclass
class Outcome:
    ttft: dict[Tier, list[float]] = field(default_factory=lambda: {t: [] for t in Tier})
    shed: dict[Tier, int] = field(default_factory=lambda: dict.fromkeys(Tier, 0))
    done: dict[Tier, int] = field(default_factory=lambda: dict.fromkeys(Tier, 0))


def run(rate: float, mix: dict[Tier, float], seconds: float = 120.0, seed: int = 1, warmup: float = 10.0) -> Outcome:
    """Poisson arrivals at ``rate`` for ``seconds``; latencies count after ``warmup`` (the time
    the gateway takes to learn the engines' concurrency from a cold start)."""
    config = parse_config({
        "tenants": [{"name": "t", "key_sha256": "0" * 64, "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "p", "models": ["m"], "replicas": [{"url": "http://x"}]}],
    })
    pool = PoolSpec("p", ("m",), (ReplicaSpec("r0"), ReplicaSpec("r1")))
    flow = Flow(flow_policy(config, pools=[pool]))
    engines = {"r0": ToyEngine(), "r1": ToyEngine()}
    rng = random.Random(seed)
    events: list[tuple[float, int, Callable[[float], None]]] = []
    seq = 0
    out = Outcome()

    def at(t: float, fn: Callable[[float], None]) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, fn))

    def act(actions: list[object], now: float) -> None:
        for a in actions:
            if isinstance(a, Dispatch):
                engine_add(a.req, a.replica.id, now)
            elif isinstance(a, Respond) and a.req is not None:
                out.shed[a.req.served] += 1

    def engine_add(req: FlowRequest, rid: str, now: float) -> None:
        # Until the next step boundary the request shows as waiting, as on a busy vLLM.
        engines[rid].waiting.append(req)
        at((now // STEP_S + 1) * STEP_S, lambda t, i=rid: start_some(i, t))

    def start_some(rid: str, now: float) -> None:
        engine = engines[rid]
        while engine.waiting and engine.running < SEQS:
            req = engine.waiting.popleft()
            engine.running += 1
            at(now + PREFILL_S, lambda t, r=req: first_token(r, t))
            at(now + PREFILL_S + DECODE_S, lambda t, r=req, i=rid: finish(r, i, t))

    def first_token(req: FlowRequest, now: float) -> None:
        if req.arrival >= warmup:
            out.ttft[req.served].append(now - req.arrival)
        act(flow.first_byte(req, now), now)

    def finish(req: FlowRequest, rid: str, now: float) -> None:
        engines[rid].running -= 1
        out.done[req.served] += 1
        act(flow.finished(req, now, 200), now)
        at((now // STEP_S + 1) * STEP_S, lambda t, i=rid: start_some(i, t))

    def scrape(now: float) -> None:
        for rid, e in engines.items():
            act(flow.scraped(rid, ReplicaLoad(running=e.running, waiting=len(e.waiting), kv_usage=0.3), now), now)
        if now < seconds + 60:
            at(now + 1.0, scrape)

    def arrive(now: float) -> None:
        tier = rng.choices(list(mix), weights=list(mix.values()))[0]
        req = flow.open(tenant="t", model="m", tier_body=tier.value, stream=True, now=now)
        assert isinstance(req, FlowRequest)
        act(flow.arrive(req, now), now)
        nxt = now + rng.expovariate(rate)
        if nxt < seconds:
            at(nxt, arrive)

    at(0.0, scrape)
    at(0.5, arrive)
    while events:
        t, _, fn = heapq.heappop(events)
        wake = flow.wake_at()
        if wake <= t:
            act(flow.tick(wake), wake)
        fn(t)
    return out


def p95(values: list[float]) -> float:
    s = sorted(values)
    return s[int(0.95 * (len(s) - 1))]


CAPACITY = 2 * SEQS / (PREFILL_S + DECODE_S)  # ≈ 21 req/s


@pytest.mark.parametrize("mix", [{Tier.TURBO: 0.2, Tier.STANDARD: 0.8},
                                 {Tier.TURBO: 0.2, Tier.STANDARD: 0.75, Tier.RELAX: 0.05}])
def test_turbo_keeps_its_unloaded_latency_at_twice_capacity(mix: dict[Tier, float]) -> None:
    light = run(0.2 * CAPACITY, mix, seconds=60)
    heavy = run(2.0 * CAPACITY, mix)
    ratio = p95(heavy.ttft[Tier.TURBO]) / p95(light.ttft[Tier.TURBO])
    assert ratio <= 1.5, ratio
    assert heavy.shed[Tier.TURBO] == 0
    total = sum(heavy.done.values())
    assert heavy.done[Tier.STANDARD] / total >= 0.2  # Standard's configured minimum share
    if Tier.RELAX in mix:
        assert heavy.done[Tier.RELAX] > 0
    assert heavy.shed[Tier.STANDARD] > 0  # Standard's excess is what gets shed


def test_turbo_alone_still_grows_the_limits_to_what_the_engines_run() -> None:
    """Turbo takes only slots an engine has been seen running (a slow-start limit may overshoot
    the engine); with no lower tier queued to push the limits, it must grow them itself, so a
    Turbo-only overload from a cold start still gets the fleet's capacity."""
    seconds = 60.0
    out = run(1.5 * CAPACITY, {Tier.TURBO: 1.0}, seconds=seconds)
    assert out.done[Tier.TURBO] >= 0.85 * CAPACITY * seconds, (out.done[Tier.TURBO], CAPACITY * seconds)
