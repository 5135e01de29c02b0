"""The gateway and the simulator behave the same by construction: the same event sequences,
fed through the gateway's flow driver (gateway/driver.py, on a fake clock, no sockets) and
through the simulator's (sim/core.py, in virtual time), give the same actions, the same final
status and the same usage record.  Each side runs its real driver code; only the transport is
scripted: the gateway side gets its upstream errors as the exceptions its client raises, the
simulator its failures as the kinds its replicas produce."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.sched.test_flow import fresh, policy
from turbogate.engine import EngineConfig
from turbogate.errors import UpstreamError
from turbogate.gateway.driver import FlowDriver, Handle
from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.sched import Cancel, Dispatch, Failure, Flow, FlowRequest, HealthChange, Probe, Replica, Respond
from turbogate.sched.metering import LimitRefusal, UsageRecord
from turbogate.sim.core import Call, Simulation
from turbogate.sim.replica import SimReplica
from turbogate.sim.requests import SimRequest

PROMPT, MAX_TOKENS, ANSWER = 40, 64, 30
LIMIT = LimitRefusal("tenant_rate_limit", "the tenant made 10 requests this minute (limit 10)", 42)


@dataclass(frozen=True)
class Step:
    what: str  # arrive | first_byte | finish | fail | tick | gone | follow
    t: float
    kind: Failure | None = None
    sent_tokens: int = 0  # of a failure: the tokens its client already had
    limited: bool = False  # of an arrival: the tenant limits refuse it


def _norm(action: object) -> tuple[Any, ...]:
    if isinstance(action, Dispatch):
        return ("dispatch", action.req.id, action.replica.id, action.retry)
    if isinstance(action, Respond):
        return ("respond", None if action.req is None else action.req.id, action.status, action.code,
                action.retry_after_s)
    if isinstance(action, Cancel):
        return ("cancel", action.req.id)
    if isinstance(action, HealthChange):
        return ("health", action.replica.id, action.healthy, action.reason)
    if isinstance(action, Probe):
        return ("probe", action.replica.id)
    return (type(action).__name__,)


@dataclass
class Outcome:
    actions: list[list[tuple[Any, ...]]]  # per step, what the driver carried out
    status: int | None  # the flow's final status
    client_status: int | None  # what the client got
    usage: UsageRecord | None
    follower_usage: UsageRecord | None = None


def _flow() -> Flow:
    flow = Flow(policy(replicas=2))
    flow.hung.enabled = False  # deadlines alone here (a replica this silent would be hung: tests/sched/test_hung.py)
    fresh(flow, 0.0)
    return flow


def open_request(flow: Flow, now: float) -> FlowRequest:
    """One request as gateway/edge.py opens it (a follower is opened the same way)."""
    opened = flow.open(tenant="acme", model="m", max_tokens=MAX_TOKENS, prompt_bytes=4 * PROMPT, stream=True,
                       now=now)
    assert isinstance(opened, FlowRequest)
    return opened


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _upstream_error(kind: Failure) -> UpstreamError:
    """What the gateway's HTTP client raises for each kind of failure (httpclient.py)."""
    return UpstreamError(f"{kind.value}", before_response=kind is not Failure.BROKEN,
                         connect_failed=kind is Failure.CONNECT)


async def _gateway(steps: Iterable[Step]) -> Outcome:
    clock = _Clock()
    flow = _flow()

    async def probe(replica: Replica) -> bool:
        return True

    driver = FlowDriver(flow, probe, clock=clock)
    carried: list[object] = []
    real_run = driver.run

    def run(actions: Iterable[object]) -> None:  # records what the real driver carries out
        actions = list(actions)
        carried.extend(actions)
        real_run(actions)

    driver.run = run  # type: ignore[method-assign]
    task = asyncio.get_running_loop().create_task(asyncio.sleep(3600))  # the request's coroutine
    req: FlowRequest | None = None
    follower: FlowRequest | None = None
    per_step: list[list[tuple[Any, ...]]] = []
    client_status: int | None = None
    for step in steps:
        clock.t = step.t
        carried.clear()
        if step.what == "arrive":  # as gateway/edge.py opens it and gateway/serve.py feeds it
            req = open_request(flow, step.t)
            req.handle = Handle(task)
            driver.run(flow.arrive(req, step.t, LIMIT if step.limited else None))
        elif step.what == "follow":  # gateway/edge.py: an identical request joins the call under way
            follower = open_request(flow, step.t)
        else:
            assert req is not None
            if step.what == "first_byte":  # gateway/proxy.py
                driver.first_byte(req)
            elif step.what == "finish":
                req.prompt_tokens, req.completion_tokens = PROMPT, ANSWER  # the engine's usage (usage_scan.py)
                client_status = 200
                driver.finished(req, 200)
                if follower is not None:  # its last byte relayed (gateway/metering.py follower_send)
                    flow.settle(follower, 200, step.t, req)
            elif step.what == "fail":
                assert step.kind is not None
                answer = driver.failed(req, _upstream_error(step.kind), 100 * step.sent_tokens, step.sent_tokens)
                if answer is not None:
                    client_status = answer.status
            elif step.what == "tick":  # the driver's one timer fires
                driver._fire()
            elif step.what == "gone":  # gateway/watch.py: the client left
                driver.run(flow.client_gone(req, clock()))
                client_status = 499
        per_step.append([_norm(a) for a in carried])
    assert req is not None
    answer = req.handle.answer() if isinstance(req.handle, Handle) else None
    if answer is not None:
        client_status = answer.status
    driver.close()
    task.cancel()
    return Outcome(per_step, req.status, client_status, req.usage,
                   None if follower is None else follower.usage)


def _sim(steps: Iterable[Step]) -> Outcome:
    flow = _flow()
    dep = deployment(get_gpu("L4"), resolve_model("llama-3.1-8b"))
    replicas = [SimReplica(r.id, r.pool, dep, EngineConfig(max_num_seqs=8), delay_s=0.0)
                for r in flow.picker.replicas()]
    for rep in replicas:
        rep.frozen = True  # its engine never runs: the script says what each replica does
    limited: list[bool] = [False]
    sim = Simulation(flow, replicas, [], model="m", tenants=["acme"], stream=True,
                     limits=lambda req, now: LIMIT if limited[0] else None)
    carried: list[object] = []
    real_act = sim._act

    def act(actions: list[Any], now: float) -> None:  # records what the real driver carries out
        carried.extend(actions)
        real_act(actions, now)

    sim._act = act  # type: ignore[method-assign]
    req: FlowRequest | None = None
    follower: FlowRequest | None = None
    per_step: list[list[tuple[Any, ...]]] = []
    for step in steps:
        carried.clear()
        if step.what == "arrive":
            limited[0] = step.limited
            sim._arrive(step.t, SimRequest(1, step.t, 0, 1.0, PROMPT, MAX_TOKENS, ANSWER, "length", None, None, None))
            first = carried[0]
            assert isinstance(first, Dispatch | Respond) and first.req is not None
            req = first.req
        elif step.what == "follow":  # the simulator does not coalesce: the Flow's intake and settle
            follower = open_request(flow, step.t)
        else:
            assert req is not None
            call = req.handle
            assert isinstance(call, Call)
            if step.what == "first_byte":
                sim._first_byte(step.t, (call, call.attempt))
            elif step.what == "finish":
                sim._finished(step.t, (call, call.attempt, ANSWER))
                if follower is not None:
                    flow.settle(follower, 200, step.t, req)
            elif step.what == "fail":
                assert step.kind is not None
                sim._failed(step.t, (call, call.attempt, step.kind, step.sent_tokens))
            elif step.what == "tick":  # its loop's timer for the Flow comes due
                sim._tick(step.t, math.inf)
            elif step.what == "gone":
                sim._gone(step.t, call)
        per_step.append([_norm(a) for a in carried])
    assert req is not None
    (record,) = sim.records
    return Outcome(per_step, req.status, record.status, req.usage, None if follower is None else follower.usage)


SCENARIOS: dict[str, list[Step]] = {
    "success": [Step("arrive", 0.0), Step("first_byte", 0.1), Step("finish", 0.5)],
    "connect failure": [Step("arrive", 0.0), Step("fail", 0.01, Failure.CONNECT), Step("first_byte", 0.1),
                        Step("finish", 0.5)],
    "reset": [Step("arrive", 0.0), Step("fail", 0.05, Failure.RESET), Step("fail", 0.08, Failure.RESET)],
    "mid-stream break": [Step("arrive", 0.0), Step("first_byte", 0.1), Step("fail", 0.3, Failure.BROKEN,
                                                                            sent_tokens=7)],
    "deadline": [Step("arrive", 0.0), Step("tick", 60.0), Step("finish", 61.0)],  # a late finish changes nothing
    "client gone": [Step("arrive", 0.0), Step("first_byte", 0.1), Step("gone", 0.2), Step("fail", 0.25,
                                                                                          Failure.BROKEN)],
    "tenant limit": [Step("arrive", 0.0, limited=True)],
    "coalesced follower": [Step("arrive", 0.0), Step("follow", 0.05), Step("first_byte", 0.1), Step("finish", 0.5)],
}
EXPECTED = {  # the final status each sequence must end in, and what the client sees
    "success": (200, 200), "connect failure": (200, 200), "reset": (502, 502), "mid-stream break": (502, 502),
    "deadline": (504, 504), "client gone": (499, 499), "tenant limit": (429, 429), "coalesced follower": (200, 200),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_gateway_and_the_simulator_drive_the_flow_alike(name: str) -> None:
    steps = SCENARIOS[name]
    gateway = asyncio.run(_gateway(steps))
    sim = _sim(steps)
    assert gateway.actions == sim.actions
    assert (gateway.status, gateway.client_status) == (sim.status, sim.client_status) == EXPECTED[name]
    assert gateway.usage is not None and gateway.usage == sim.usage
    assert gateway.follower_usage == sim.follower_usage


def test_the_sequences_reach_the_rules_they_name() -> None:
    # Not vacuous: the retry, the two 502s, the 504, the cancel and the 429 are each there.
    out = {name: _sim(steps) for name, steps in SCENARIOS.items()}
    (retry,) = [a for a in out["connect failure"].actions[1] if a[0] == "dispatch"]
    assert retry[3] is True  # on the other replica: the one refused is ejected
    assert ("health", retry[2], False, "connection refused") not in out["connect failure"].actions[1]
    assert [a[3] for a in out["reset"].actions[2] if a[0] == "respond"] == ["upstream_unavailable"]
    broke = out["mid-stream break"]
    assert [a[3] for a in broke.actions[2] if a[0] == "respond"] == ["upstream_error"]
    assert broke.usage is not None and broke.usage.completion_tokens == 7
    assert [a[3] for a in out["deadline"].actions[1] if a[0] == "respond"] == ["deadline_exceeded"]
    assert out["deadline"].actions[2] == []
    assert ("cancel", 1) in out["client gone"].actions[2] and out["client gone"].actions[3] == []
    assert out["tenant limit"].actions == [[("respond", 1, 429, "tenant_rate_limit", 42)]]
    follower = out["coalesced follower"].follower_usage
    assert follower is not None and (follower.status, follower.completion_tokens) == (200, ANSWER)
