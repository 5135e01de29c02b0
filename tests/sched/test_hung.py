"""The hung-replica rule (sched/hung.py) in the pure flow, with a fake clock: a replica that holds
requests and shows no sign of life (no first byte, no finish, no stream chunk, no answered
scrape) for a time that scales with its own measured pace is ejected at any load; what it held
and had sent nothing is withdrawn and sent elsewhere, what had begun is cut off with a 502, and
the L1 places they held are free at the ejection."""

from __future__ import annotations

from collections.abc import Callable

from tests.sched.helpers import one_pool, open_request
from turbogate.sched import (
    Cancel,
    Dispatch,
    Flow,
    FlowPolicy,
    FlowRequest,
    HealthChange,
    ReplicaLoad,
    Respond,
    ScrapeFailed,
    Tier,
    TierPolicy,
)
from turbogate.sched.actions import Action
from turbogate.sched.hung import HungPolicy

TIERS = {t: TierPolicy(queue_budget_s=60, deadline_s=120) for t in Tier}
STEP = 0.25


def policy(replicas: int = 2, cap: int = 8) -> FlowPolicy:
    return one_pool(TIERS, ("acme",), replicas=replicas, cap=cap, eject_after_failures=3)


def new(flow: Flow, now: float, stream: bool = True, tier: str = "default") -> FlowRequest:
    return open_request(flow, "acme", now, tier_body=tier, stream=stream, max_tokens=64)


class Clock:
    """Drives the flow as the gateway does: scrapes every second (a frozen replica's time out),
    ticks at ``wake_at``, and collects every action."""

    def __init__(self, flow: Flow, frozen: set[str] | None = None) -> None:
        self.flow = flow
        self.now = 0.0
        self.frozen = frozen if frozen is not None else set()
        self.actions: list[Action] = []
        self.next_scrape = 0.0
        self.on_step: Callable[[float], None] | None = None
        self.ejected: dict[str, float] = {}  # replica → when it was first ejected

    def scrape(self) -> None:
        for r in self.flow.picker.replicas():
            if r.id in self.frozen:
                result: ReplicaLoad | ScrapeFailed = ScrapeFailed(kind="timeout")
            else:
                result = ReplicaLoad(running=r.in_flight, waiting=0, kv_usage=0.1)
            self.actions += self.flow.scraped(r.id, result, self.now)

    def until(self, end: float) -> None:
        while self.now < end - 1e-9:
            self.now = round(self.now + STEP, 6)
            if self.now >= self.next_scrape:
                self.scrape()
                self.next_scrape = self.now + 1.0
            if self.on_step is not None:
                self.on_step(self.now)
            if self.flow.wake_at() <= self.now:
                self.actions += self.flow.tick(self.now)
            for r in self.flow.picker.replicas():
                if r.ejections and r.id not in self.ejected:
                    self.ejected[r.id] = self.now


def start(flow: Flow) -> Clock:
    clock = Clock(flow)
    clock.scrape()
    return clock


def test_a_frozen_replica_holding_one_request_is_ejected_and_the_request_goes_elsewhere() -> None:
    flow = Flow(policy())
    clock = start(flow)
    req = new(flow, 0.0)
    (sent,) = [a for a in flow.arrive(req, 0.0) if isinstance(a, Dispatch)]
    clock.frozen.add(sent.replica.id)  # frozen right after it took the request: the lowest load there is
    patience = flow.hung.patience(flow.hung.held[sent.replica.id], sent.replica)
    assert patience == 4 * HungPolicy().default_ttfb_s  # nothing measured yet: 4 × the default first byte
    clock.until(20.0)
    changes = [a for a in clock.actions if isinstance(a, HealthChange)]
    assert len(changes) == 1 and not changes[0].healthy and "hung" in changes[0].reason
    when = clock.ejected[sent.replica.id]
    assert patience <= when <= patience + 2 * HungPolicy().check_every_s
    # Withdrawn (nothing was sent to its client) and dispatched to the other replica, once.
    cancel = [i for i, a in enumerate(clock.actions) if isinstance(a, Cancel) and a.req is req]
    again = [i for i, a in enumerate(clock.actions) if isinstance(a, Dispatch) and a.req is req]
    assert len(cancel) == 1 and len(again) == 1 and cancel[0] < again[0]
    assert clock.actions[again[0]].replica is not sent.replica  # type: ignore[union-attr]
    assert not any(isinstance(a, Respond) for a in clock.actions)
    assert sent.replica.in_flight == 0 and sent.replica.awaiting_first == 0


def test_patience_scales_with_the_replicas_measured_time_to_first_byte() -> None:
    flow = Flow(policy(replicas=2))
    clock = start(flow)
    slow = flow.picker.get("r0")
    flow.picker.get("r1").health = slow.health  # (both healthy)
    # r0 is measured slow to a first byte: 3 s a stream, so it may stay silent 12 s.
    t = 0.0
    for _ in range(6):
        req = new(flow, t)
        flow.arrive(req, t)
        if req.replica is slow:
            flow.first_byte(req, t + 3.0)
            flow.finished(req, t + 3.5)
        else:
            flow.first_byte(req, t + 0.1)
            flow.finished(req, t + 0.5)
        t += 4.0
    clock.now = clock.next_scrape = t
    clock.scrape()
    held = new(flow, t)
    while True:  # the next one that goes to r0
        flow.arrive(held, t)
        if held.replica is slow:
            break
        flow.first_byte(held, t + 0.1)
        flow.finished(held, t + 0.2)
        held = new(flow, t)
    clock.frozen.add("r0")
    patience = flow.hung.patience(flow.hung.held["r0"], slow)
    assert 11.0 <= patience <= 13.0
    clock.until(t + patience - 1.0)
    assert slow.ejections == 0  # the default 3 s would have ejected it long ago
    clock.until(t + patience + 1.0)
    assert slow.ejections == 1


def test_a_live_engine_answering_its_scrapes_is_not_taken_for_hung() -> None:
    # A long prefill (no byte for a minute) on an engine whose /metrics answers: not a hang.
    flow = Flow(policy(replicas=1))
    clock = start(flow)
    req = new(flow, 0.0)
    flow.arrive(req, 0.0)
    clock.until(60.0)
    assert flow.picker.get("r0").ejections == 0 and req.phase.name == "UPSTREAM"


def test_streams_moving_are_progress_and_a_stalled_stream_is_cut_off_with_502() -> None:
    flow = Flow(policy(replicas=2))
    clock = start(flow)
    req = new(flow, 0.0)
    flow.arrive(req, 0.0)
    replica = req.replica
    assert replica is not None
    flow.first_byte(req, 0.2)
    clock.frozen.add(replica.id)  # no scrape answers from here on; only its chunks say it lives
    clock.on_step = lambda now: setattr(replica, "chunks", replica.chunks + 1) if now < 10.0 else None
    clock.until(10.0)
    assert replica.ejections == 0  # ten seconds of chunks, no scrape: alive
    clock.until(20.0)  # the chunks stop at 10 s
    assert replica.ejections == 1
    cut = [a for a in clock.actions if isinstance(a, Respond) and a.req is req]
    assert [(a.status, a.code) for a in cut] == [(502, "upstream_hung")]
    assert any(isinstance(a, Cancel) and a.req is req for a in clock.actions)
    assert req.done and req.usage is not None  # metered like any other end


def test_the_healthy_replica_gets_the_whole_budget_at_ejection() -> None:
    cap = 8
    flow = Flow(policy(replicas=2, cap=cap))
    clock = start(flow)
    reqs = [new(flow, 0.0) for _ in range(3 * cap)]
    for req in reqs:
        clock.actions += flow.arrive(req, 0.0)
    frozen = flow.picker.get("r0")
    healthy = flow.picker.get("r1")
    stuck = [r for r in reqs if r.replica is frozen]
    assert stuck  # some went to the replica that freezes now
    clock.frozen.add("r0")
    # r1 answers its streams' first bytes at once and never finishes them: it keeps its slots busy.
    clock.on_step = lambda now: [flow.first_byte(r, now) for r in reqs
                                 if r.replica is healthy and r.phase.name == "UPSTREAM"]
    clock.until(10.0)
    assert frozen.ejections == 1 and frozen.in_flight == 0
    pool = dict(flow.admissions())["p"]
    assert healthy.in_flight == cap  # its full limit, none of it held by the frozen replica's requests
    assert pool.in_flight == cap
    assert all(r.replica is healthy or r.phase.name == "QUEUED" for r in stuck)
    assert not any(isinstance(a, Respond) and a.status >= 500 for a in clock.actions)


def test_a_replica_without_metrics_is_given_the_longest_patience() -> None:
    flow = Flow(one_pool(TIERS, ("acme",), replicas=2, cap=8, scraped=False))
    clock = Clock(flow)
    req = new(flow, 0.0)
    flow.arrive(req, 0.0)
    held = req.replica
    assert held is not None
    clock.until(HungPolicy().max_s - 1.0)  # a CPU engine's cold first answer may take this long
    assert held.ejections == 0
    clock.until(HungPolicy().max_s + 2.0)
    assert held.ejections == 1 and req.replica is not held


def test_a_requeued_request_keeps_its_own_queue_limit_behind_later_arrivals() -> None:
    """Withdrawn from a hung replica with no room elsewhere, a request waits again, no longer than
    its queue limit from its arrival: due before a later arrival's, it is shed first (the flow reads
    its timers from the front, so the requeued one must go in at its place, not behind)."""
    flow = Flow(policy(replicas=2, cap=1))
    clock = start(flow)
    early, busy, late = new(flow, 0.0), new(flow, 0.0), new(flow, 1.0)
    (sent,) = [a for a in flow.arrive(early, 0.0) if isinstance(a, Dispatch)]
    assert any(isinstance(a, Dispatch) for a in flow.arrive(busy, 0.0))
    assert flow.arrive(late, 1.0) == []  # both replicas full: it waits
    clock.frozen.add(sent.replica.id)
    clock.until(10.0)
    assert sent.replica.id in clock.ejected and early.ticket is not None  # withdrawn, waiting again
    limit = flow._limits[early.served][1]
    clock.until(limit + STEP)  # past the early one's limit, before the late one's (1 s later)
    shed = [a for a in clock.actions if isinstance(a, Respond)]
    assert [a.req for a in shed] == [early] and late.ticket is not None
