"""A request's fair-queue cost is what it used (issue 43, point 2; sched/fair_cost.py), in the pure
flow with a fake clock: a tenant that sent one ``max_tokens: 131000`` stream and dropped it has
its next 60 Standard requests served as soon as a tenant's that did not, beside a busier tenant;
a declared bound far above the model's usual answers is charged an estimate at admission, and the
rest if the answer runs longer."""

from __future__ import annotations

import pytest

from tests.sched.helpers import one_pool, open_request
from turbogate.sched import Flow, FlowRequest, ReplicaLoad, Tier, TierPolicy
from turbogate.sched.fair_cost import FAR, MIN_SAMPLES

TIERS = {t: TierPolicy(queue_budget_s=600, deadline_s=900) for t in Tier}
SERVICE_S = 0.1  # each answer takes this long
ANSWER = 50  # tokens each answer gives


def make_flow() -> Flow:
    flow = Flow(one_pool(TIERS, ("dropper", "control", "busy"), cap=2))
    flow.scraped("r0", ReplicaLoad(running=0, waiting=0, kv_usage=0.1), 0.0)
    return flow


def new(flow: Flow, tenant: str, now: float, max_tokens: int = 256) -> FlowRequest:
    return open_request(flow, tenant, now, max_tokens=max_tokens, prompt_bytes=400, stream=True)


def serve_until_empty(flow: Flow, start: float, reqs: list[FlowRequest]) -> None:
    """Every ``SERVICE_S`` the replica answers what it runs (first byte at once, ``ANSWER`` tokens)."""
    now = start
    while not all(r.done for r in reqs):
        now += SERVICE_S
        for r in [r for r in reqs if r.phase.name in ("UPSTREAM", "ANSWERING")]:
            flow.first_byte(r, now - SERVICE_S / 2)
            r.completion_tokens = ANSWER
            flow.finished(r, now, 200)
        assert now < start + 600, "the queue never drained"


def waits(reqs: list[FlowRequest]) -> list[float]:
    return sorted(r.dispatched_at - r.arrival for r in reqs if r.dispatched_at is not None)  # type: ignore[operator]


@pytest.mark.parametrize("dropped", ["queued", "streaming"])
def test_a_dropped_huge_stream_costs_its_tenant_nothing_afterwards(dropped: str) -> None:
    flow = make_flow()
    warm = [new(flow, "busy", 0.0) for _ in range(4)]  # answers measured: the replica's token gap is known
    for r in warm:
        flow.arrive(r, 0.0)
    serve_until_empty(flow, 0.0, warm)
    t = 1.0
    if dropped == "streaming":  # it runs and is dropped after a fraction of a second of tokens
        huge = new(flow, "dropper", 0.5, max_tokens=131000)
        flow.arrive(huge, 0.5)
        assert huge.phase.name == "UPSTREAM"
        flow.first_byte(huge, 0.6)
        flow.client_gone(huge, 0.9)
    busy = [new(flow, "busy", t) for _ in range(100)]  # the busier tenant keeps the queue full
    for r in busy:
        flow.arrive(r, t)
    if dropped == "queued":
        huge = new(flow, "dropper", t, max_tokens=131000)
        flow.arrive(huge, t)
        assert huge.phase.name == "QUEUED"
        flow.client_gone(huge, t + 0.01)
    assert huge.done
    mine, theirs = [], []
    for _ in range(60):
        mine.append(new(flow, "dropper", t + 0.02))
        theirs.append(new(flow, "control", t + 0.02))
        flow.arrive(mine[-1], t + 0.02)
        flow.arrive(theirs[-1], t + 0.02)
    serve_until_empty(flow, t, busy + mine + theirs)
    assert all(r.status == 200 for r in mine + theirs)
    # Served as soon as the tenant that sent nothing huge: each of the 60 within one answer's time.
    for a, b in zip(waits(mine), waits(theirs), strict=True):
        assert abs(a - b) <= SERVICE_S + 1e-9
    assert waits(mine)[-1] < waits(busy)[-1]  # and not behind the busier tenant's backlog


def test_a_declared_bound_far_above_the_usual_answer_is_charged_an_estimate() -> None:
    flow = make_flow()
    first = [new(flow, "busy", 0.0) for _ in range(MIN_SAMPLES)]
    for r in first:
        flow.arrive(r, 0.0)
    serve_until_empty(flow, 0.0, first)
    assert flow.lengths.p95("m") == ANSWER
    huge = new(flow, "dropper", 10.0, max_tokens=131000)
    small = new(flow, "dropper", 10.0, max_tokens=100)
    prompt = 400 / 4
    assert huge.cost == pytest.approx(int(FAR * ANSWER) + 1 + prompt)  # the estimate, not 131,000
    assert small.cost == pytest.approx(100 + prompt)  # a bound near the usual answer stands
    # The estimate buys no more than it uses: an answer longer than it is charged in full at the end.
    admission = dict(flow.admissions())["p"]
    flow.arrive(huge, 10.0)
    flow.first_byte(huge, 10.1)
    huge.completion_tokens = 3000
    tag = admission._queues[Tier.STANDARD].finish["dropper"]
    flow.finished(huge, 20.0, 200)
    assert admission._queues[Tier.STANDARD].finish["dropper"] == pytest.approx(tag + 3000 - (int(FAR * ANSWER) + 1))
