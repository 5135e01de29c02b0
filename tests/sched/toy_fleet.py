"""A toy fleet for pure-core tests: a fake clock, an event heap and one toy engine per replica
(``max_num_seqs`` slots, a FIFO queue behind them admitted at step boundaries as vLLM does, a
fixed prefill and decode time), driving the real ``Flow`` with Poisson arrivals.

Shared by the Turbo-isolation and surge tests, so both measure the same engine.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from turbogate.sched import Dispatch, Flow, FlowRequest, ReplicaLoad, Respond, Tier

PREFILL_S = 0.02
DECODE_S = 1.5
STEP_S = 0.012  # an engine admits waiting requests only at step boundaries, as vLLM does


@dataclass
class ToyEngine:
    running: int = 0
    waiting: deque[FlowRequest] = field(default_factory=deque)


@dataclass
class Served:
    """One request as the toy fleet saw it."""

    arrival: float
    asked: Tier
    served: Tier
    ttft: float | None = None  # None: no first token (refused, or never started)
    status: int = 200
    waited: float = 0.0  # arrival to the refusal, for a refused one
    downgrade: str | None = None
    done: bool = False  # its answer finished


def capacity(seqs: int, replicas: int) -> float:
    """Requests per second the toy fleet completes at saturation."""
    return replicas * seqs / (PREFILL_S + DECODE_S)


def run_toy(flow: Flow, *, replicas: int, seqs: int,
            mix: Mapping[Tier, float] | Callable[[float], Mapping[Tier, float]], rate: Callable[[float], float],
            until: float, seed: int, first_at: float, scrape_s: float = 1.0) -> list[Served]:
    """Arrivals from ``first_at`` on at ``rate(now)`` (tiers drawn from ``mix``, or ``mix(now)``) until ``until``;
    replicas ``r0`` … ``r{replicas-1}`` (the flow's pool must name them so), scraped every
    ``scrape_s`` until a minute past the last arrival.  Every request's record, in arrival order."""
    engines = {f"r{i}": ToyEngine() for i in range(replicas)}
    rng = random.Random(seed)
    events: list[tuple[float, int, Callable[[float], None]]] = []
    seq = 0
    out: dict[int, Served] = {}

    def at(t: float, fn: Callable[[float], None]) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, fn))

    def act(actions: Sequence[object], now: float) -> None:
        for a in actions:
            if isinstance(a, Dispatch):
                # Until the next step boundary the request shows as waiting, as on a busy vLLM.
                engines[a.replica.id].waiting.append(a.req)
                at((now // STEP_S + 1) * STEP_S, partial(start_some, a.replica.id))
            elif isinstance(a, Respond) and a.req is not None:
                rec = out[a.req.id]
                rec.served, rec.status, rec.waited = a.req.served, a.status, now - a.req.arrival

    def start_some(rid: str, now: float) -> None:
        engine = engines[rid]
        while engine.waiting and engine.running < seqs:
            req = engine.waiting.popleft()
            engine.running += 1
            at(now + PREFILL_S, partial(first_token, req))
            at(now + PREFILL_S + DECODE_S, partial(finish, req, rid))

    def first_token(req: FlowRequest, now: float) -> None:
        rec = out[req.id]
        rec.served, rec.ttft = req.served, now - req.arrival
        act(flow.first_byte(req, now), now)

    def finish(req: FlowRequest, rid: str, now: float) -> None:
        engines[rid].running -= 1
        rec = out[req.id]
        rec.served, rec.done = req.served, True
        act(flow.finished(req, now, 200), now)
        at((now // STEP_S + 1) * STEP_S, partial(start_some, rid))

    def scrape(now: float) -> None:
        for rid, e in engines.items():
            act(flow.scraped(rid, ReplicaLoad(running=e.running, waiting=len(e.waiting), kv_usage=0.3), now), now)
        if now < until + 60:
            at(now + scrape_s, scrape)

    def arrive(now: float) -> None:
        shares = mix(now) if callable(mix) else mix
        tier = rng.choices(list(shares), weights=list(shares.values()))[0]
        req = flow.open(tenant="t", model="m", tier_body=tier.value, stream=True, now=now)
        assert isinstance(req, FlowRequest)
        out[req.id] = Served(now, req.asked, req.served, downgrade=req.downgrade)
        act(flow.arrive(req, now), now)
        nxt = now + rng.expovariate(rate(now))
        if nxt < until:
            at(nxt, arrive)

    at(0.0, scrape)
    at(first_at, arrive)
    while events:
        t, _, fn = heapq.heappop(events)
        wake = flow.wake_at()
        if wake <= t:
            act(flow.tick(wake), wake)
        fn(t)
    return list(out.values())
