"""The flow's timers (``Flow.wake_at``, ``Flow.tick``): queue limits, deadlines, first-byte
watches, health and round-trip probes, warm-ups and the hung-replica check, each due at a time
the driver's one timer waits for.  Pure: ``now`` is passed in; called by sched/flow.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from turbogate.sched.actions import Action, Cancel, Phase, Probe, Respond
from turbogate.sched.fair_cost import settle
from turbogate.sched.flow_finish import meter
from turbogate.sched.flow_table import FlowEvent, move
from turbogate.sched.picker import Health
from turbogate.sched.regions import rtt_probes

if TYPE_CHECKING:
    from turbogate.sched.flow import Flow

_QUEUED, _UPSTREAM, _ANSWERING, _DONE = Phase.QUEUED, Phase.UPSTREAM, Phase.ANSWERING, Phase.DONE
_QUEUE_LIMIT, _DEADLINE = FlowEvent.QUEUE_LIMIT, FlowEvent.DEADLINE


def wake_at(flow: Flow) -> float:
    """See ``Flow.wake_at``."""
    if flow._warm:
        flow._wake_floor = 0.0
        return 0.0  # replicas joined: their warm-ups are due now
    due = min(flow._probe_at, flow._health_at, flow._rtt_probe_at)
    for q in flow._tier_timers:
        while q and q[0][1].phase is _DONE:
            q.popleft()
        if q and q[0][0] < due:
            due = q[0][0]
    fb = flow._first_byte_timers
    while fb and (fb[0][1].phase is not _UPSTREAM or fb[0][1].replica is not fb[0][2]):
        fb.popleft()
    if fb and fb[0][0] < due:
        due = fb[0][0]
    if flow.hung.next_at < due:
        due = flow.hung.next_at
    flow._wake_floor = due
    return due


def tick(flow: Flow, now: float) -> list[Action]:
    """See ``Flow.tick``."""
    out: list[Action] = []
    touched: set[str] = set()
    picker = flow.picker
    for q in flow._queue_timers.values():
        while q and (q[0][0] <= now or q[0][1].phase is not _QUEUED):
            _, req = q.popleft()
            if req.phase is _QUEUED and req.ticket is not None:
                pool = flow.pools[req.pool]
                settle(pool.admission, req, flow.policy.max_cost_tokens, now, None)  # it used nothing
                shed = pool.admission.timed_out(req.ticket, now, picker.slots(req.pool, now))
                req.ticket = None  # (as in Flow._close: no cycle left behind)
                move(req, _QUEUE_LIMIT, _DONE)
                req.status = shed.status
                meter(flow, req, shed.status, now)
                out.append(Respond(req, shed.status, shed.reason, shed.message, shed.retry_after_s))
                touched.add(req.pool)
    for q in flow._deadline_timers.values():
        while q and (q[0][0] <= now or q[0][1].phase is _DONE):
            _, req = q.popleft()
            # A queued request's queue limit comes no later than its deadline; a stream's deadline
            # covers its first byte only.
            if req.phase is _UPSTREAM or (req.phase is _ANSWERING and not req.stream):
                replica = req.replica
                assert replica is not None
                what = "the first byte" if req.stream else "the answer"
                picker.on_failure(replica, now, hard=False, reason=f"no {what} within the "
                                  f"{req.served.value} deadline")
                out.append(Cancel(req))
                out.append(flow._refuse(req, _DEADLINE, 504, "deadline_exceeded", f"the {req.served.value} tier "
                                        f"deadline passed before {what} came", now))
                touched.add(req.pool)
    fb = flow._first_byte_timers
    while fb and fb[0][0] <= now:
        _, req, replica = fb.popleft()
        if req.phase is _UPSTREAM and req.replica is replica:  # still no byte from it: a strike
            picker.on_failure(replica, now, hard=False, dispatched=False, reason="no first byte within "
                              f"{flow.policy.picker.slow_first_byte_s:g}s")
    if now >= flow._probe_at:
        out.extend(Probe(r) for r in picker.due_probes(now))
        flow._probe_at = picker.next_probe_at()
    if now >= flow._health_at:
        flow._health_at = now + flow.policy.health_interval_s
        # Only idle ones: a replica answering requests shows its health in them (their failures and
        # slow first bytes count against it), and a probe there can cost an answer:
        # llama_cpp.server cuts the stream it is sending when another request waits for its model
        # lock, and its /v1/models takes that lock (interrupt_requests, on by default).
        out.extend(Probe(r) for r in picker.replicas()
                   if not r.scraped and r.health is Health.HEALTHY and r.in_flight == 0)
    if now >= flow._rtt_probe_at:
        flow._rtt_probe_at = now + flow.regions.policy.probe_interval_s
        flow._rtt_turn += 1
        out.extend(rtt_probes(picker, list(flow.pools), flow._rtt_turn))
    if flow._warm:
        out.extend(flow._warm_ups(flow._warm))
        flow._warm = []
    for replica, why in flow.hung.check(picker.get, now):
        picker.eject(replica, now, why)
    flow._health(out)
    for name in touched:
        flow._pump(flow.pools[name], now, out)
    flow.timers_epoch += 1
    return out
