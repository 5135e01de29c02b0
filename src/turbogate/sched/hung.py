"""A hung replica: found by its silence, at any load, and made to let go of its requests.

A replica that holds requests shows progress: first bytes, finished answers, and stream chunks
(the shell counts each chunk it relays in ``Replica.chunks``; the simulator counts engine
steps).  A frozen engine (SIGSTOP, a deadlock) shows none, whatever the load: one request
held is enough to notice it.  How long a silence may last scales with what the replica itself
was measured to need before its next sign of life:

* a stream awaiting its first byte: its time to first byte (EWMA of its dispatch → first byte);
* a stream answering: its gap between tokens (EWMA of (finish − first byte) / tokens);
* a whole (non-stream) answer: its service time (the picker's EWMA of a full answer);

the shortest of these among the requests it holds, times ``factor``, within ``[min_s, max_s]``.
A replica with metrics must also have stopped vouching for itself: its last scrape went
unanswered, or its metrics are stale (a live engine keeps answering ``/metrics``; a frozen
process cannot), so a long prefill on a healthy engine is not taken for a hang.  One without
metrics (``engine: openai``, llama.cpp) has nothing to vouch for it: ``max_s`` of silence.

A hung replica is ejected.  At any ejection (hung, strikes, a refused connection) the flow lets
go of the requests the replica holds (``release``): a request that has sent nothing to its
client is withdrawn (``Cancel``) and put back at its place in its tier's queue, so the pump
sends it to another replica; when it was found hung, one whose answer had begun is cut off (``Cancel`` and
a 502: its bytes cannot be taken back); ejected for its errors, it may still be streaming, and
those streams end as they end.  Their L1 places go with them, so the healthy replicas get
the pool's whole dispatch budget at once, not when the stuck calls time out.

Pure: ``now`` is passed in; the flow calls the hooks and carries out ``release``'s actions.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from turbogate.sched.actions import Action, Cancel, FlowRequest, Phase
from turbogate.sched.flow_table import FlowEvent, move
from turbogate.sched.replica import Health, Replica

if TYPE_CHECKING:
    from turbogate.sched.flow import Flow

_UPSTREAM, _ANSWERING, _QUEUED = Phase.UPSTREAM, Phase.ANSWERING, Phase.QUEUED
_EWMA = 0.2
HUNG = "hung"  # how the reason of a hung replica's ejection begins


@dataclass(frozen=True, slots=True)
class HungPolicy:
    factor: float = 4.0  # a silence this many times the expected gap to the next sign of life
    #: Never sooner: above a scrape interval plus its timeout (1 s each by default), so a live
    #: engine's answered scrapes always vouch for it.
    min_s: float = 3.0
    max_s: float = 30.0  # never later, however slow the replica was measured to be
    default_ttfb_s: float = 1.0  # before a first byte was measured at the replica
    default_gap_s: float = 0.25  # between two tokens of a stream, before one was measured
    check_every_s: float = 0.5  # how often busy replicas are looked at


class _Held:
    """What one replica holds, and when it last showed progress."""

    __slots__ = ("chunks", "gap_s", "requests", "since", "streams_waiting", "ttfb_s", "whole_waiting")

    def __init__(self) -> None:
        self.requests: dict[int, FlowRequest] = {}
        self.since = 0.0  # its last sign of life, or when it began to hold requests
        self.chunks = 0  # Replica.chunks at the last look
        self.ttfb_s: float | None = None
        self.gap_s: float | None = None
        self.streams_waiting = 0  # held streams without a first byte
        self.whole_waiting = 0  # held non-stream requests


def _ewma(prev: float | None, sample: float) -> float:
    return sample if prev is None else prev + _EWMA * (sample - prev)


class HungWatch:
    """The flow's hung-replica rule (see the module docstring).  ``enabled`` False (the plain
    baselines, which let engines queue): every hook returns at once."""

    def __init__(self, policy: HungPolicy | None = None, enabled: bool = True, stale_after_s: float = 5.0) -> None:
        self.policy = policy or HungPolicy()
        self.enabled = enabled
        self.stale_after_s = stale_after_s
        self.unanswered_at: dict[str, float] = {}  # each replica's last scrape that got no answer
        self.held: dict[str, _Held] = {}
        self.next_at = math.inf  # the next look (inf: nothing held anywhere)
        self.found = 0  # replicas found hung (for /admin/state and tests)
        self.now = 0.0  # the latest time a hook was told (an ejection's release is dated by it)

    # ---- hooks (the flow calls them) ------------------------------------------------------------
    def dispatched(self, req: FlowRequest, replica: Replica, now: float) -> float:
        """``req`` goes to ``replica`` (after leaving the one it was on, on a retry); the next look,
        so the flow can tell its driver when it came nearer."""
        if not self.enabled:
            return math.inf
        self.now = max(self.now, now)
        if req.replica is not None and req.replica is not replica:
            self.forget(req)
        held = self.held.get(replica.id)
        if held is None:
            held = self.held[replica.id] = _Held()
        if not held.requests:
            held.since = now  # the silence is counted from when it began to hold something
            held.chunks = replica.chunks
        held.requests[req.id] = req
        if req.stream:
            held.streams_waiting += 1
        else:
            held.whole_waiting += 1
        if self.next_at == math.inf:
            self.next_at = now + self.policy.check_every_s
        return self.next_at

    def first_byte(self, req: FlowRequest, now: float) -> None:
        held = self._of(req)
        if held is None:
            return
        held.since = self.now = max(self.now, now)
        if req.stream:
            held.streams_waiting -= 1
        else:
            held.whole_waiting -= 1
        if req.dispatched_at is not None:
            held.ttfb_s = _ewma(held.ttfb_s, now - req.dispatched_at)

    def finished(self, req: FlowRequest, now: float) -> None:
        held = self._of(req)
        if held is None:
            return
        held.since = self.now = max(self.now, now)
        if req.stream and req.first_byte_at is not None and req.completion_tokens > 1:
            held.gap_s = _ewma(held.gap_s, (now - req.first_byte_at) / (req.completion_tokens - 1))

    def forget(self, req: FlowRequest) -> None:
        """``req`` is no longer held by its replica (it ended, or moves to another)."""
        held = self._of(req)
        if held is None or held.requests.pop(req.id, None) is None:
            return
        if req.phase is _UPSTREAM:
            if req.stream:
                held.streams_waiting -= 1
            else:
                held.whole_waiting -= 1

    def unanswered(self, replica_id: str, now: float) -> None:
        """A scrape of the replica failed (a frozen process's times out)."""
        self.unanswered_at[replica_id] = now

    def vouched(self, replica: Replica, now: float) -> bool:
        """A replica's metrics vouch that it lives: its last scrape was answered, and not too long
        ago (``stale_after_s``: older metrics are stale to L2 as well)."""
        return (replica.scraped and replica.load_at > self.unanswered_at.get(replica.id, -math.inf)
                and now - replica.load_at <= self.stale_after_s)

    def _of(self, req: FlowRequest) -> _Held | None:
        if not self.enabled or req.replica is None:
            return None
        held = self.held.get(req.replica.id)
        return held if held is not None and req.id in held.requests else None

    # ---- the rule -------------------------------------------------------------------------------
    def patience(self, held: _Held, replica: Replica) -> float:
        """How long ``replica`` may stay silent while holding what it holds."""
        p = self.policy
        ttfb = held.ttfb_s if held.ttfb_s is not None else p.default_ttfb_s
        gaps = []
        if held.streams_waiting:
            gaps.append(ttfb)
        if held.whole_waiting:
            gaps.append(replica.service_s if replica.service_s is not None else ttfb + 256 * p.default_gap_s)
        if len(held.requests) > held.streams_waiting + held.whole_waiting:  # streams answering
            gaps.append(held.gap_s if held.gap_s is not None else p.default_gap_s)
        expected = min(gaps) if gaps else ttfb
        return min(p.max_s, max(p.min_s, p.factor * expected))

    def check(self, replica_of: Callable[[str], Replica], now: float) -> list[tuple[Replica, str]]:
        """The replicas found hung at ``now``, each with why (the caller ejects them)."""
        if now < self.next_at:
            return []
        self.now = max(self.now, now)
        hung: list[tuple[Replica, str]] = []
        busy = False
        for rid, held in self.held.items():
            if not held.requests:
                continue
            busy = True
            replica = replica_of(rid)
            if replica.chunks != held.chunks:  # streams moved since the last look
                held.chunks = replica.chunks
                held.since = now
            if replica.health is not Health.HEALTHY:
                continue
            patience = self.patience(held, replica)
            if not replica.scraped:  # no metrics to say it lives: only the longest silence tells
                patience = max(patience, self.policy.max_s)
            silent = now - held.since
            if silent <= patience or self.vouched(replica, now):
                continue
            self.found += 1
            hung.append((replica, f"{HUNG}: no byte from it for {silent:.1f}s while it held {len(held.requests)} "
                                  f"requests (its measured pace allows {patience:.1f}s), and no metrics either"))
        self.next_at = now + self.policy.check_every_s if busy else math.inf
        return hung

    def token_gap(self, req: FlowRequest) -> float | None:
        """The measured gap between tokens of the replica ``req`` is on (None: not measured)."""
        held = self.held.get(req.replica.id) if req.replica is not None else None
        return held.gap_s if held is not None else None

    def describe(self, replica_id: str) -> dict[str, float | int | None]:
        held = self.held.get(replica_id)
        if held is None:
            return {"held": 0}
        return {"held": len(held.requests), "ttfb_s": held.ttfb_s, "token_gap_s": held.gap_s}


def _insert_timer(timers: deque[tuple[float, FlowRequest]], due: float, req: FlowRequest) -> None:
    """Put ``(due, req)`` at its place in ``timers``, kept in due order: the flow reads only the
    front (wake_at, tick), so a requeued request's earlier limit appended behind later ones would
    surface only when those end, a due time coming nearer with no epoch change for the driver."""
    at = len(timers)
    while at and timers[at - 1][0] > due:
        at -= 1
    timers.insert(at, (due, req))


def release(flow: Flow, replica: Replica, reason: str, now: float) -> list[Action]:
    """Let go of what an ejected ``replica`` holds (see the module docstring): withdraw and
    requeue what sent nothing to its client and, when it was ejected as hung (``reason``), cut
    off what had begun (a replica ejected for its errors may still be streaming); then pump its
    pool."""
    held = flow.hung.held.get(replica.id)
    if held is None or not held.requests:
        return []
    out: list[Action] = []
    pool = flow.pools[replica.pool]
    hung = reason.startswith(HUNG)
    for req in list(held.requests.values()):
        if req.phase is not _UPSTREAM and not hung:
            continue  # its answer is flowing: it ends as it ends
        flow.hung.forget(req)
        flow.picker.on_release(replica)
        out.append(Cancel(req))
        ticket = req.ticket
        if req.phase is _UPSTREAM and ticket is not None and not flow._plain:
            flow._leave_upstream(req)
            req.replica = None
            move(req, FlowEvent.REQUEUE, _QUEUED)
            req.retried = True
            pool.admission.requeue(ticket)
            # Its queue-limit timer was let go at dispatch: it waits no longer than the limit again.
            _insert_timer(flow._queue_timers[req.served], req.arrival + flow._limits[req.served][1], req)
        else:
            why = "began its answer" if req.phase is _ANSWERING else "held it"
            out.append(flow._refuse(req, FlowEvent.CUT, 502, "upstream_hung", f"the engine replica that {why} stopped "
                                    "responding and was ejected", now))
    flow.timers_epoch += 1
    return flow._pump(pool, now, out)
