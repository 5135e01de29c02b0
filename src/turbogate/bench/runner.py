"""The open-loop runner: sends each scheduled request at its absolute time, whatever came before.

The schedule is computed before the first send; a single dispatcher sleeps to each absolute
send time (no drift from accumulated sleeps) and starts a task per request.  How late a task
actually started (dispatch lag) and how long it then waited for a ``--max-concurrency`` slot
(client queue time) are recorded on every request, so a slow client never hides inside latency.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import cast

import aiohttp
import orjson

from turbogate.bench.arrivals import Scheduled
from turbogate.bench.client import TIER_HEADER, Outcome, send_request
from turbogate.bench.failures import error_reason
from turbogate.bench.http11 import Exchange, Http11Pool, describe
from turbogate.bench.workload import request_body
from turbogate.errors import UpstreamError
from turbogate.results.percentile import percentile
from turbogate.results.schema import RequestRecord

TIER_VIA: tuple[str, ...] = ("body", "header", "both")
#: The lean loop parses answers only while the next send is further away than this (s).
FINISH_MARGIN_S = 0.0005
#: Below this, a timer would fire at once anyway (uvloop's timers round to whole milliseconds).
TIMER_RESOLUTION_S = 0.0005
SPIN_NAP_S = 0.00005
#: Young-generation GC threshold during a run, and how many records between two ``gc.freeze()``:
#: a young collection then walks at most a few thousand objects (well under a millisecond).
GC_YOUNG_THRESHOLD = 5_000
FREEZE_EVERY = 256
UNFINISHED = "unfinished: still running when the drain/grace time ran out"  # RequestRecord.unfinished reads it


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str
    route: str
    model: str
    api_keys: tuple[str, ...] = ()
    stream: bool = True
    ignore_eos: bool = True
    min_tokens: bool = False
    tier_via: str = "both"
    timeout_s: float = 600.0
    max_concurrency: int | None = None
    client: str = "auto"  # "lean" (own HTTP/1.1, http:// only), "aiohttp", or "auto" (lean when possible)

    @property
    def use_lean(self) -> bool:
        return self.client == "lean" or (self.client == "auto" and self.base_url.startswith("http://"))

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.route

    @property
    def chat(self) -> bool:
        return "chat" in self.route


@dataclass
class LiveState:
    """Counters the live display and the bench-side collector read."""

    scheduled: int = 0
    dispatched: int = 0
    in_flight: int = 0
    done: int = 0
    ok: int = 0
    errors: int = 0  # answered and failed (shed included), as the final table counts them
    unfinished: int = 0  # still running when the drain / grace ran out
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)  # errors by reason
    offered_rps: float = 0.0
    step: int = 0
    finished_at: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=100_000))
    recent_e2e: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=2000))
    recent_lag: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=2000))

    def achieved_rps(self, now: float, window: float = 5.0) -> float:
        n = 0
        for t in reversed(self.finished_at):
            if t < now - window:
                break
            n += 1
        return n / window


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Runner:
    """Runs schedules against one target; times are seconds since :attr:`t0`."""

    def __init__(self, target: Target, state: LiveState | None = None, lead_s: float = 0.2,
                 start_wall: float | None = None) -> None:
        """Times count from ``lead_s`` from now, or from the wall-clock instant ``start_wall``
        (``bench --workers``: every worker process on one common start)."""
        self.target = target
        self.state = state or LiveState()
        self.records: list[RequestRecord] = []
        self.stop = asyncio.Event()
        if start_wall is not None:
            lead_s = start_wall - time.time()
        self.t0 = time.perf_counter() + lead_s
        self.t0_wall = time.time() + lead_s
        self._session: aiohttp.ClientSession | None = None
        self._lean = Http11Pool(target.base_url) if target.use_lean else None
        self._sem = asyncio.Semaphore(target.max_concurrency) if target.max_concurrency else None
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: set[Exchange] = set()  # the lean client's requests on the wire
        self._answered: collections.deque[Exchange] = collections.deque()  # complete, not yet parsed
        self._waiter: asyncio.Future[None] | None = None
        self._next_id = 0

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use the Runner as 'async with Runner(...)'")
        return self._session

    def cancel_in_flight(self) -> None:
        """Cancel every request still running; each is recorded as unfinished."""
        for t in list(self._tasks):
            t.cancel()
        now = time.perf_counter()
        for ex in list(self._in_flight):  # the lean client's: drop the connection, record it now
            ex.abort()
            item, rid, started = cast(tuple[Scheduled, int, float], ex.tag)
            self.state.in_flight -= 1
            self._done(item, rid, started, Outcome(sent=ex.sent, end=now, error=UNFINISHED))
        self._in_flight.clear()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    async def __aenter__(self) -> Runner:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.target.timeout_s)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._lean is not None:
            self._lean.close()
        if self._session is not None:
            await self._session.close()

    async def execute(self, schedule: Sequence[Scheduled], grace_s: float = 30.0, drain_s: float | None = None) -> None:
        """Dispatch ``schedule`` (absolute times), then wait for what is in flight.

        When :attr:`stop` is set, sending stops at once; in-flight requests get ``grace_s`` to
        finish and are then cancelled (and recorded as such); unsent ones are recorded as not sent.
        After a complete schedule, in-flight requests get ``drain_s`` (None: until their timeout).
        """
        self.state.scheduled += len(schedule)
        # Nothing built so far (the schedule included) needs the cyclic GC again: freeze it.  Records
        # live until the run ends, so every FREEZE_EVERY of them are frozen too (see _done): the young
        # generation stays small and a collection of it short, so GC pauses do not show up as lag.
        gc.freeze()
        old_threshold = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 100)
        try:
            await self._dispatch(schedule, grace_s, drain_s)
        finally:
            gc.set_threshold(*old_threshold)
            gc.unfreeze()

    async def _dispatch(self, schedule: Sequence[Scheduled], grace_s: float, drain_s: float | None) -> None:
        if self._lean is not None and self._sem is None:
            await self._dispatch_lean(self._lean, schedule, grace_s, drain_s)
            return
        i = 0
        n = len(schedule)
        while i < n and not self.stop.is_set():
            item = schedule[i]
            delay = item.t - self.now()
            if delay > 0:
                # Sleep to the absolute time; wake early on stop.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), delay) if delay > 0.05 else await asyncio.sleep(delay)
                continue
            self.state.step, self.state.offered_rps = item.step, item.offered_rps
            task = asyncio.create_task(self._one(item, self._new_id()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            i += 1
        for item in schedule[i:]:
            self.records.append(self._unsent(item, self._new_id()))
        await self._drain(grace_s if self.stop.is_set() else drain_s)

    async def _drain(self, grace_s: float | None) -> None:
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _unsent(self, item: Scheduled, rid: int) -> RequestRecord:
        return RequestRecord(
            id=rid, step=item.step, offered_rps=item.offered_rps, scheduled_s=item.t, sent_s=None,
            dispatch_lag_s=0.0, queue_s=0.0, end_s=None, tier_asked=item.spec.tier, tier_served=None, status=None,
            ok=False, error="not sent: the run was stopped", ttft_s=None, itl_s=(), tpot_s=None, e2e_s=None,
            prompt_tokens=None, output_tokens=None, api_key=item.spec.api_key)

    def _headers_and_body(self, item: Scheduled) -> tuple[dict[str, str], dict[str, object]]:
        tgt = self.target
        spec = item.spec
        headers = {"Content-Type": "application/json"}
        if tgt.api_keys and spec.api_key is not None:
            headers["Authorization"] = f"Bearer {tgt.api_keys[spec.api_key]}"
        if spec.tier is not None and tgt.tier_via in ("header", "both"):
            headers[TIER_HEADER] = spec.tier
        body = request_body(spec, model=tgt.model, chat=tgt.chat, stream=tgt.stream, ignore_eos=tgt.ignore_eos,
                            min_tokens=tgt.min_tokens, tier_in_body=tgt.tier_via in ("body", "both"))
        return headers, body

    # ---- the lean client's loop: sends first, answers in between -------------------------------
    async def _dispatch_lean(self, lean: Http11Pool, schedule: Sequence[Scheduled], grace_s: float,
                             drain_s: float | None) -> None:
        """Sends and answers on one coroutine, sends first.  A due request is written at once, from
        here, on an idle connection (no task hop); answers, which the protocol only collects (bytes
        and arrival times), are parsed and recorded here while no send is due within
        ``FINISH_MARGIN_S``; so a burst of answers waits for the next send, never the reverse."""
        done = self._answered
        i, n = 0, len(schedule)
        batch = 0
        while i < n and not self.stop.is_set():
            item = schedule[i]
            delay = item.t - self.now()
            if delay <= 0:
                self.state.step, self.state.offered_rps = item.step, item.offered_rps
                self._send_lean(lean, item, self._new_id())
                i += 1
            elif done and delay > FINISH_MARGIN_S:
                self._finish_lean(lean, done.popleft())
                batch += 1
                if batch % 64 == 0:
                    await asyncio.sleep(0)  # let the protocol and the live display run
            elif delay < TIMER_RESOLUTION_S:
                # The loop's timers round to whole ms, so the last half ms is waited out here: short
                # blocking naps between turns of the loop (a bare spin cost ~75 turns per request),
                # so an arriving byte is read, and timed, at most SPIN_NAP_S late.
                time.sleep(min(delay, SPIN_NAP_S))
                await asyncio.sleep(0)
            else:
                # Until just before the send is due (rounding can then only make it early), or an
                # answer, or 50 ms (to notice a stop).
                await self._wait(min(delay - TIMER_RESOLUTION_S, 0.05))
        for item in schedule[i:]:
            self.records.append(self._unsent(item, self._new_id()))
        limit = grace_s if self.stop.is_set() else drain_s
        deadline = None if limit is None else self.now() + limit
        batch = 0
        while self._in_flight or done or self._tasks:
            if done:
                self._finish_lean(lean, done.popleft())
                batch += 1
                if batch % 64 == 0:
                    await asyncio.sleep(0)  # let the protocol and the live display run
                continue
            left = None if deadline is None else deadline - self.now()
            if left is not None and left <= 0:
                break
            await self._wait(0.05 if left is None else min(left, 0.05))
        self.cancel_in_flight()
        while done:
            self._finish_lean(lean, done.popleft())
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    async def _wait(self, timeout: float) -> None:
        """Sleep ``timeout`` at most; an answer arriving wakes it early."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _on_answer(self, ex: Exchange) -> None:
        """Protocol callback: the answer is complete (or failed).  Queue it, nothing else."""
        self._in_flight.discard(ex)
        if ex.should_retry:
            self._spawn(self._resend(ex.retry(), fresh=True))
            return
        self._answered.append(ex)
        if self._waiter is not None:
            _wake(self._waiter)

    def _send_lean(self, lean: Http11Pool, item: Scheduled, rid: int) -> None:
        """Write ``item``'s request now; only a new connection is left to a task."""
        started = time.perf_counter()
        self.state.dispatched += 1
        self.state.in_flight += 1
        tgt = self.target
        try:
            headers, body = self._headers_and_body(item)
            payload = orjson.dumps(body)
            ex = Exchange(tgt.route, payload, lean.head(tgt.route, payload, headers), tgt.timeout_s, started)
            ex.tag = (item, rid, started)
            ex.on_done = self._on_answer
            if lean.start_now(ex):
                self._in_flight.add(ex)
            else:
                self._spawn(self._resend(ex))
        except Exception as exc:  # a client bug must cost one record, not the run
            self.state.in_flight -= 1
            self._done(item, rid, started, Outcome(sent=started, end=time.perf_counter(),
                                                   error=f"client error: {type(exc).__name__}: {exc}"[:300]))

    def _spawn(self, coro: Coroutine[None, None, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resend(self, ex: Exchange, fresh: bool = False) -> None:
        """Open a connection and write ``ex`` on it (no idle one, or a stale one to retry)."""
        lean = self._lean
        assert lean is not None
        item, rid, started = cast(tuple[Scheduled, int, float], ex.tag)
        try:
            await lean.start(ex, fresh)
        except UpstreamError as exc:
            self.state.in_flight -= 1
            self._done(item, rid, started, Outcome(sent=started, end=time.perf_counter(), error=describe(exc)))
        except asyncio.CancelledError:
            self.state.in_flight -= 1
            self._done(item, rid, started, Outcome(sent=started, end=time.perf_counter(), error=UNFINISHED))
        else:
            self._in_flight.add(ex)

    def _finish_lean(self, lean: Http11Pool, ex: Exchange) -> None:
        item, rid, started = cast(tuple[Scheduled, int, float], ex.tag)
        self.state.in_flight -= 1
        try:
            out = lean.outcome(ex, self.target.stream)
        except Exception as exc:  # a client bug must cost one record, not the run
            out = Outcome(sent=started, end=time.perf_counter(),
                          error=f"client error: {type(exc).__name__}: {exc}"[:300])
        self._done(item, rid, started, out)

    async def _one(self, item: Scheduled, rid: int) -> None:
        """A request on aiohttp (https), or on the lean client behind ``--max-concurrency``."""
        started = time.perf_counter()
        st = self.state
        st.dispatched += 1
        st.in_flight += 1
        tgt = self.target
        out: Outcome | None = None
        acquired = False
        try:
            if self._sem is not None:
                await self._sem.acquire()
                acquired = True
            headers, body = self._headers_and_body(item)
            if self._lean is not None:
                out = await self._lean.post(tgt.route, orjson.dumps(body), headers, tgt.stream, tgt.timeout_s)
            else:
                out = await send_request(self.session, tgt.url, body, headers, tgt.stream)
        except asyncio.CancelledError:
            now = time.perf_counter()
            out = Outcome(sent=started, end=now, error=UNFINISHED)
        except Exception as exc:  # a client bug must cost one record, not the run
            now = time.perf_counter()
            out = Outcome(sent=started, end=now, error=f"client error: {type(exc).__name__}: {exc}"[:300])
        finally:
            if acquired and self._sem is not None:
                self._sem.release()
            st.in_flight -= 1
            self._done(item, rid, started, out)

    def _done(self, item: Scheduled, rid: int, started: float, out: Outcome | None) -> None:
        st = self.state
        if out is None:
            now = time.perf_counter()
            out = Outcome(sent=now, end=now, error="client error before send")
        rec = self._record(item, rid, started, out)
        self.records.append(rec)
        st.done += 1
        if st.done % FREEZE_EVERY == 0:
            gc.freeze()  # the records so far, out of the collector's sight (a list merge: cheap)
        if out.ok:
            st.ok += 1
            st.finished_at.append(out.end - self.t0)
            if out.e2e is not None:
                st.recent_e2e.append(out.e2e)
        elif out.error == UNFINISHED:
            st.unfinished += 1
        else:
            st.errors += 1
            st.reasons[error_reason(rec) or "unknown"] += 1
        st.recent_lag.append(started - self.t0 - item.t)

    def _record(self, item: Scheduled, rid: int, started: float, out: Outcome) -> RequestRecord:
        t0 = self.t0
        started_s = started - t0
        sent_s = out.sent - t0
        return RequestRecord(
            id=rid, step=item.step, offered_rps=item.offered_rps, scheduled_s=item.t, sent_s=sent_s,
            dispatch_lag_s=started_s - item.t, queue_s=max(0.0, sent_s - started_s), end_s=out.end - t0,
            tier_asked=item.spec.tier, tier_served=out.tier_served, status=out.status, ok=out.ok, error=out.error,
            ttft_s=out.ttft, itl_s=out.itl, tpot_s=out.tpot, e2e_s=out.e2e, prompt_tokens=out.prompt_tokens,
            output_tokens=out.output_tokens, server_timing_ms=out.server_timing, api_key=item.spec.api_key,
            replica=out.replica)

    def p95_e2e(self) -> float | None:
        return percentile(self.state.recent_e2e, 95)

    def p99_lag(self) -> float | None:
        return percentile(self.state.recent_lag, 99)
