"""Turbo keeps its latency at 2× overload with the default policy (issue 19), in the pure core.

A fake clock and a toy engine per replica (``max_num_seqs`` slots, a FIFO queue behind them,
a fixed prefill and decode time) stand in for real engines; the flow is the real one, with the
default tier policy from ``turbogate.config`` and no ``max_concurrency`` anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from turbogate.config import parse_config
from turbogate.configpolicy import flow_policy
from turbogate.sched import Flow, PoolSpec, ReplicaSpec, Tier

from .toy_fleet import Served, capacity, run_toy

SEQS = 16


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
    records: list[Served] = run_toy(flow, replicas=2, seqs=SEQS, mix=mix, rate=lambda _now: rate, until=seconds,
                                    seed=seed, first_at=0.5)
    out = Outcome()
    for r in records:
        if r.ttft is not None and r.arrival >= warmup:
            out.ttft[r.served].append(r.ttft)
        if r.status in (429, 503):
            out.shed[r.served] += 1
        if r.done:
            out.done[r.served] += 1
    return out


def p95(values: list[float]) -> float:
    s = sorted(values)
    return s[int(0.95 * (len(s) - 1))]


CAPACITY = capacity(SEQS, 2)  # ≈ 21 req/s


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
