"""The discrete-event loop: the gateway's own Flow and one EngineLoop per replica, in virtual time.

A heap of ``(time, seq, callback, arg)``; each callback feeds one event to the Flow (or to an
engine) and carries out the actions it returns, exactly as the gateway shell does with
sockets.  Nothing here decides a tier, a queue, a replica, a retry or a shed: the Flow does.

Network: a message crosses client↔gateway in ``c2g`` seconds and gateway↔replica in the
replica's ``delay`` (one way).  A down replica refuses connections (``Failure.CONNECT`` one
delay later); the requests it held break (``RESET`` before their first byte, ``BROKEN`` after).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from turbogate.engine import Request, RequestTooLarge
from turbogate.results import RequestRecord
from turbogate.sched.actions import Cancel, Dispatch, Failure, FlowRequest, Probe, Respond
from turbogate.sched.flow import Flow
from turbogate.sched.load import ReplicaLoad
from turbogate.sched.metering import LimitRefusal
from turbogate.sched.picker import ScrapeFailed
from turbogate.sched.regions import MeasureRtt
from turbogate.sched.tiers import Tier
from turbogate.sim.regions import SimRegions
from turbogate.sim.replica import SimReplica
from turbogate.sim.requests import SimRequest

_NO_TIMING: dict[str, float] = {}  # shared by every record (never mutated; a mappingproxy cannot pickle)
TIMER_RESOLUTION_S = 0.001  # the gateway's one timer is no finer either
_TIER_BODY = {"turbo": "priority", "standard": "default", "relax": "flex"}
_TIER_NAME: dict[Tier, str] = {t: t.value for t in Tier}  # a dict read per record, not the enum's .value property

#: Events between two progress callbacks.
PROGRESS_EVERY = 4096


class Call:
    """One request's life in the simulation (the Flow's ``handle``)."""

    __slots__ = ("attempt", "closed", "first_at", "flow", "leg", "rep", "rid", "sim", "t_sent")

    def __init__(self, sim: SimRequest, t_sent: float) -> None:
        self.sim = sim
        self.t_sent = t_sent
        self.rid = str(sim.id)
        self.flow: FlowRequest | None = None
        self.rep: SimReplica | None = None
        self.attempt = 0  # bumped per dispatch and per failure: stale engine news is dropped
        self.first_at: float | None = None  # client saw the first byte
        self.closed = False  # its record is written
        self.leg = 0.0  # client-leg round trip to its pool's region (L3, sim/regions.py)


class Simulation:
    """Run ``requests`` through ``flow`` onto ``replicas``; ``run()`` returns one record each."""

    def __init__(self, flow: Flow, replicas: list[SimReplica], requests: Iterable[SimRequest], *, model: str,
                 tenants: list[str], stream: bool = True, c2g_s: float = 0.0, scrape_interval_s: float = 1.0,
                 staleness_s: float = 0.0, outages: Iterable[tuple[float, str, bool]] = (),
                 freezes: Iterable[tuple[float, str]] = (),
                 progress: Callable[[float], None] | None = None, regions: SimRegions | None = None,
                 warmup: Iterable[SimRequest] = (), warmup_s: float = 0.0,
                 limits: Callable[[FlowRequest, float], LimitRefusal | None] | None = None) -> None:
        self.flow = flow
        #: The tenants' global limits' verdict on an arrival (the gateway asks its shared store),
        #: the Flow's input at ``arrive``; None: no limits.
        self.limits = limits
        self.regions = regions
        self.replicas = {r.id: r for r in replicas}
        self._scraped = [r for r in replicas if r.scraped]
        # Warm-up requests (ids < 0, times in [0, warmup_s)) run first and leave no record; the
        # measured requests and the outages follow, shifted by warmup_s, and their records are
        # shifted back, so a warm run's records read like a cold run's (docs/sim.md, warm-up).
        self._t0 = warmup_s
        self._requests: Iterator[SimRequest] = itertools.chain(warmup, requests)
        self.model = model
        self.tenants = tenants  # tenant per API key index; [0] also serves key-less requests
        self.stream = stream
        self.c2g = c2g_s
        self.scrape_interval = scrape_interval_s
        self.staleness = staleness_s
        self.records: list[RequestRecord] = []
        self._heap: list[tuple[float, int, Callable[[float, Any], None], Any]] = []
        self._seq = itertools.count()
        self._armed = math.inf
        self._last_tick = -math.inf
        self._open = 0  # requests sent and not yet answered
        self._more = True  # the schedule has more requests
        self._progress = progress
        self._fed = True  # the Flow was fed an event since its wake-up time was last read
        #: Until then the gateway is down: arrivals are refused and it hears nothing (sim/restart.py).
        self.down_until = -math.inf
        self._calls: list[Call] | None = None  # every call opened, kept only for a restart
        for t, rid, up in outages:
            self._push(t + warmup_s, self._up if up else self._down, self.replicas[rid])
        for t, rid in freezes:
            self._push(t + warmup_s, self._freeze, self.replicas[rid])
        # The Flow's view of each replica: an engine step is progress of the streams it holds (sched/hung.py).
        self._flow_replica = {r.id: flow.picker.get(r.id) for r in replicas}

    # ---- the loop -------------------------------------------------------------------------

    def _push(self, t: float, fn: Callable[[float, Any], None], arg: Any) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), fn, arg))

    def run(self) -> list[RequestRecord]:
        self._next_arrival()
        if self._scraped:
            self._push(0.0, self._scrape, None)
        heap, pop = self._heap, heapq.heappop
        progress, every, n = self._progress, PROGRESS_EVERY, 0
        while heap and (self._open or self._more):
            t, _, fn, arg = pop(heap)
            fn(t, arg)
            if not self._fed:
                continue  # e.g. an engine step with no news: the Flow's timers are as they were
            self._fed = False
            w = self.flow.wake_at()  # read each time: a restart swaps the Flow
            if w < self._armed:
                # Never before now, nor again within a timer tick of the last tick: a timer the
                # Flow leaves due must not spin the loop at one instant.
                self._armed = w = max(w, t, self._last_tick + TIMER_RESOLUTION_S)
                heapq.heappush(heap, (w, next(self._seq), self._tick, w))
            n += 1
            if progress is not None and n % every == 0:
                progress(max(0.0, t - self._t0))
        return self.records

    def _tick(self, t: float, armed: float) -> None:
        if armed != self._armed:
            return  # superseded by an earlier wake-up
        self._armed = math.inf
        self._last_tick = t
        self._act(self.flow.tick(t), t)

    def _act(self, actions: list[Any], now: float) -> None:
        """Carry out what the Flow answered to an event (every Flow event goes through here)."""
        self._fed = True
        for a in actions:
            kind = type(a)
            if kind is Dispatch:
                call: Call = a.req.handle
                call.attempt += 1
                rep = self.replicas[a.replica.id]
                call.rep = rep
                if rep.delay:
                    self._push(now + rep.delay, self._at_replica, (call, call.attempt))
                else:  # no wire: skip the heap (the hot path of a large fleet)
                    self._at_replica(now, (call, call.attempt))
            elif kind is Respond:
                self._respond(a, now)
            elif kind is Cancel:
                call = a.req.handle
                call.attempt += 1  # news of the cancelled attempt is stale now
                held = call.rep
                if held is not None and call.rid in held.on:
                    self._push(now + held.delay, self._abort, (call, held, held.gen))
            elif kind is Probe:
                rep = self.replicas[a.replica.id]
                self._push(now + 2 * rep.delay, self._probed, rep)
            elif kind is MeasureRtt:  # L3's round-trip probe: back after the gateway↔pool round trip
                rep = self.replicas[a.replica.id]
                self._push(now + 2 * rep.delay, self._rtt_measured, rep)

    # ---- client and gateway ---------------------------------------------------------------

    def _next_arrival(self) -> None:
        req = next(self._requests, None)
        if req is None:
            self._more = False
            return
        self._push(req.t + (self._t0 if req.id >= 0 else 0.0) + self.c2g, self._arrive, req)

    def _arrive(self, now: float, req: SimRequest) -> None:
        self._next_arrival()
        self._open += 1
        call = Call(req, req.t + (self._t0 if req.id >= 0 else 0.0))
        if now < self.down_until:
            self._close(call, now + self.c2g, 502, "HTTP 502: connection refused: the gateway is restarting")
            return
        tier = req.tier
        regions = self.regions
        region = regions.region_of(req.id) if regions is not None else None
        r = self.flow.open(tenant=self.tenants[req.api_key or 0], model=self.model,
                           tier_body=_TIER_BODY[tier] if tier else None, tier_header=tier,
                           max_tokens=req.max_tokens, prompt_bytes=4 * req.prompt_tokens, stream=self.stream,
                           now=now, handle=call, client_region=region)
        if isinstance(r, Respond):
            self._fed = True
            self._close(call, now + self.c2g, r.status, f"HTTP {r.status}: {r.message}")
            return
        call.flow = r
        if self._calls is not None:
            self._calls.append(call)
        if regions is not None:
            call.leg = regions.leg_s(region, r.pool)
        limits = self.limits
        self._act(self.flow.arrive(r, now, None if limits is None else limits(r, now)), now)

    def _respond(self, a: Respond, now: float) -> None:
        if a.req is None:
            return  # only open() answers without a request, and _arrive handles that
        call = cast(Call, a.req.handle)
        self._close(call, now + self.c2g, a.status, f"HTTP {a.status}: {a.message}")

    def _close(self, call: Call, end: float, status: int | None, error: str | None, out: int | None = None) -> None:
        if call.closed:
            return  # e.g. a Respond after the driver already ended a broken stream
        call.closed = True
        self._open -= 1
        call.attempt += 1
        sim, fr = call.sim, call.flow
        call.flow = None  # the Flow's request holds this call as its handle: no cycle left behind
        if sim.id < 0:
            return  # warm-up traffic: not measured
        t0 = self._t0
        sent = call.t_sent - t0
        end -= t0
        ok = error is None
        e2e = end - sent if ok else None
        ttft = (call.first_at - call.t_sent if call.first_at is not None else e2e) if ok else None
        tpot = (e2e - ttft) / (out - 1) if ok and out and out > 1 and e2e is not None and ttft is not None else None
        rep = call.rep
        self.records.append(RequestRecord(
            sim.id, sim.step, sim.offered_rps, sim.t, sent, 0.0, 0.0, end, sim.tier,
            None if fr is None else _TIER_NAME[fr.served], status, ok, error, ttft, (), tpot, e2e,
            sim.prompt_tokens if ok else None, out, _NO_TIMING, sim.api_key, None if rep is None else rep.id))

    # ---- replicas --------------------------------------------------------------------------

    def _at_replica(self, now: float, arg: tuple[Call, int]) -> None:
        call, attempt = arg
        fr, rep = call.flow, call.rep
        if attempt != call.attempt or fr is None or fr.done or rep is None:
            return
        if rep.down:
            self._push(now + rep.delay, self._failed, (call, attempt, Failure.CONNECT, 0))
            return
        if rep.frozen:  # the kernel takes the connection; nothing answers it
            rep.on[call.rid] = call
            return
        sim = call.sim
        if sim.prompt_tokens + sim.max_tokens > rep.max_model_len:
            self._push(now + rep.delay, self._rejected, (call, attempt, 400))
            return
        loop = rep.loop
        idle = loop.next_time() is None
        try:
            loop.submit(Request(call.rid, sim.prompt_tokens, sim.output_tokens, fr.priority or 0,
                                sim.finish_reason), now)  # type: ignore[arg-type]
        except RequestTooLarge:
            self._push(now + rep.delay, self._rejected, (call, attempt, 400))
            return
        rep.on[call.rid] = call
        if idle:
            self._push(loop.next_time(), self._step, (rep, rep.gen))  # type: ignore[arg-type]

    def _step(self, now: float, arg: tuple[SimReplica, int]) -> None:
        rep, gen = arg
        if gen != rep.gen:
            return  # the replica went down: this engine is gone
        loop = rep.loop
        res = loop.advance(now)
        nt = loop.next_time()
        if nt is not None:  # armed before the news is handled, so a submit below finds it busy
            self._push(nt, self._step, arg)
        d, on = rep.delay, rep.on
        self._flow_replica[rep.id].chunks += 1
        if self.stream:
            for rid in res.first_token:
                call = on.get(rid)
                if call is None:
                    continue
                if d:
                    self._push(now + d, self._first_byte, (call, call.attempt))
                else:
                    self._first_byte(now, (call, call.attempt))
        for rid, out, _reason in res.finished:
            call = on.pop(rid, None)
            if call is None:
                continue
            if d:
                self._push(now + d, self._finished, (call, call.attempt, out))
            else:
                self._finished(now, (call, call.attempt, out))

    def _first_byte(self, now: float, arg: tuple[Call, int]) -> None:
        call, attempt = arg
        fr = call.flow
        if attempt != call.attempt or fr is None or fr.done:
            return
        call.first_at = now + self.c2g + call.leg
        rep, sent = call.rep, fr.dispatched_at  # a stream's headers come back one round trip after dispatch
        headers_at = sent + 2 * rep.delay if rep is not None and sent is not None else None
        # A first byte drops the request's first-byte timer and feeds L3 and the knee guard; it
        # answers actions only where it opened a replica's prefill gate (what queued behind it is
        # dispatched), and only then need the loop read the Flow's wake-up time again.
        actions = self.flow.first_byte(fr, now, headers_at)
        if actions:
            self._act(actions, now)

    def _finished(self, now: float, arg: tuple[Call, int, int]) -> None:
        call, attempt, out = arg
        fr = call.flow
        if attempt != call.attempt or fr is None or fr.done:
            return
        if call.first_at is None:  # not streamed: the first byte is the whole answer
            call.first_at = now + self.c2g + call.leg
            self._act(self.flow.first_byte(fr, now), now)
            if fr.done:
                return
        fr.prompt_tokens, fr.completion_tokens = call.sim.prompt_tokens, out  # metered as the gateway does
        actions = self.flow.finished(fr, now, status=200)
        self._close(call, now + self.c2g + call.leg, 200, None, out)
        self._act(actions, now)

    def _rejected(self, now: float, arg: tuple[Call, int, int]) -> None:
        call, attempt, status = arg
        fr = call.flow
        if attempt != call.attempt or fr is None or fr.done:
            return
        self._act(self.flow.first_byte(fr, now), now)
        if not fr.done:
            actions = self.flow.finished(fr, now, status=status)
            self._close(call, now + self.c2g, status, f"HTTP {status}: the replica refused the request's length")
            self._act(actions, now)

    def _failed(self, now: float, arg: tuple[Call, int, Failure, int]) -> None:
        """An attempt failed (``kind``) after its client got ``sent`` tokens: what follows (a
        retry, a 502 and its usage record) is the Flow's."""
        call, attempt, kind, sent = arg
        fr = call.flow
        if attempt != call.attempt or fr is None or fr.done:
            return
        call.attempt += 1
        self._act(self.flow.failed(fr, now, kind, sent_tokens=sent), now)

    def _gone(self, now: float, call: Call) -> None:
        """The client stopped waiting: what the request held is freed, as the Flow says."""
        fr = call.flow
        if fr is None or fr.done:
            return
        actions = self.flow.client_gone(fr, now)
        self._close(call, now + self.c2g, 499, "the client left")
        self._act(actions, now)

    def _abort(self, now: float, arg: tuple[Call, SimReplica, int]) -> None:
        call, rep, gen = arg
        if gen == rep.gen and rep.on.pop(call.rid, None) is not None:
            rep.loop.abort(call.rid, now)

    def _down(self, now: float, rep: SimReplica) -> None:
        engine = rep.loop.engine
        # A stream's client has the tokens made so far (the engine's count, before it is lost).
        sent = {call.rid: engine.output_tokens(call.rid) if call.first_at is not None and call.rid in engine else 0
                for call in rep.on.values()}
        for call in rep.crash():
            kind = Failure.BROKEN if call.first_at is not None else Failure.RESET
            self._push(now + rep.delay, self._failed, (call, call.attempt, kind, sent[call.rid]))

    def _up(self, now: float, rep: SimReplica) -> None:
        rep.down = False

    def _freeze(self, now: float, rep: SimReplica) -> None:
        """Freeze ``rep`` for good (SIGSTOP): its engine stops where it is, it still takes
        requests, and its scrapes and probes time out; the requests it holds wait."""
        rep.frozen = True
        rep.gen += 1  # its next step never comes

    def _rtt_measured(self, now: float, rep: SimReplica) -> None:
        if self._hears(now):
            self._act(self.flow.rtt_measured(rep.id, None if rep.down or rep.frozen else 2 * rep.delay, now), now)

    def _probed(self, now: float, rep: SimReplica) -> None:
        if self._hears(now):
            self._act(self.flow.probed(rep.id, not (rep.down or rep.frozen), now), now)

    def _hears(self, now: float) -> bool:
        """Whether the gateway is up to hear a scrape, probe or round trip (``down_until``)."""
        return now >= self.down_until

    @staticmethod
    def _load_of(rep: SimReplica, now: float) -> ReplicaLoad | ScrapeFailed:
        """What a scrape of ``rep`` reads at ``now``."""
        if rep.down:
            return ScrapeFailed(kind="connect")
        if rep.frozen:
            return ScrapeFailed(kind="timeout")
        engine = rep.loop.engine  # O(1) gauges, as vLLM's: stats() also measures fragmentation
        busy = rep.busy_fractions(now)  # DCGM's, scraped beside the engine's (sched/phase.py reads them)
        return ReplicaLoad(running=engine.num_running, waiting=engine.waiting_gauge, kv_usage=engine.blocks.usage,
                           tensor_active=busy.tensor_active, dram_active=busy.dram_active,
                           itl_sum_s=engine.itl_seconds, itl_tokens=engine.itl_tokens)

    def _scrape(self, now: float, _: None) -> None:
        stale = self.staleness
        for rep in self._scraped:
            load = self._load_of(rep, now)
            if stale > 0:
                self._push(now + stale, self._deliver, (rep.id, load))
            elif self._hears(now):
                self._act(self.flow.scraped(rep.id, load, now), now)
        if self._open or self._more:
            self._push(now + self.scrape_interval, self._scrape, None)

    def _deliver(self, now: float, arg: tuple[str, ReplicaLoad | ScrapeFailed]) -> None:
        if self._hears(now):
            self._act(self.flow.scraped(arg[0], arg[1], now), now)

    # ---- a gateway stopped and started again mid-run (sim/restart.py drives these) --------------

    def at(self, t: float, fn: Callable[[float], None]) -> None:
        """Call ``fn(now)`` at virtual time ``t``."""
        self._push(t, lambda now, _: fn(now), None)

    def keep_calls(self) -> None:
        """From now on, remember every call opened (``drop_all``)."""
        self._calls = []

    def drop_all(self, now: float, error: str) -> None:
        """End every open call as a gateway process dying does: its engine aborts it, its client
        gets a 502."""
        for call in self._calls or ():
            rep = call.rep
            if rep is not None and rep.on.pop(call.rid, None) is not None:
                rep.loop.abort(call.rid, now)
            self._close(call, now + self.c2g, 502, error)
        self._calls = []

    def take_over(self, flow: Flow, now: float) -> None:
        """``flow`` serves from ``now``: L2's view of each replica is its, and it scrapes every
        replica once as a starting gateway does."""
        self.flow = flow
        self._flow_replica = {rid: flow.picker.get(rid) for rid in self.replicas}
        self._armed = math.inf
        for rep in self._scraped:
            self._act(flow.scraped(rep.id, self._load_of(rep, now), now), now)

    def act(self, actions: list[Any], now: float) -> None:
        """Carry out ``actions`` a core answered outside the loop's own events."""
        self._act(actions, now)
