"""L1 admission: per-tier queues, strict tier precedence with guaranteed minimum shares, fair
shares within a tier.

Pure and sans-I/O: every method takes ``now`` (seconds on any monotonic clock) and ``slots``
(the dispatch slots the pool can use right now, from the L2 picker), so the gateway (real
clock) and the simulator (virtual clock) drive the very same decisions.

How the next request is chosen (``next_dispatch``):

* **Strict precedence.**  The best tier with a queued head that its limits allow goes first:
  Turbo before Standard before Relax.  Waiting does not raise a request's rank — under a
  sustained overload every lower-tier head is old, and an age bonus would turn the tiers into
  FIFO (measured: Turbo p95 TTFT 29 ms → 8.6 s at 2× load with 10 s aging).
* **Minimum shares against starvation.**  Each tier's share of recent dispatches is tracked
  (an EWMA over about the last ``1 / SHARE_ALPHA`` dispatches), counting only the dispatches
  made while the tier had requests queued: a tier with nothing waiting is kept from nothing (a
  night of Turbo alone must not leave Standard owed in the morning).  A tier with requests
  queued whose share is below its ``min_share`` is *owed*: its head goes next, past the holdback
  (its ``capacity_share`` cap still holds).  A share never falls more than one dispatch below
  ``min_share``, so an owed tier gets its minimum from then on, interleaved with Turbo, and not
  a long shortfall repaid in one block while Turbo waits (seconds, on a small fleet).  So under
  any load Standard gets at least ``min_share`` of the dispatches and Relax never starves to
  zero, while Turbo keeps strict precedence for the rest — and a tier that already gets more
  than its minimum (the usual case) never jumps ahead, so the holdback's headroom stays Turbo's.
* **Caps and holdback.**  A tier dispatches only while its own in-flight count is under
  ``capacity_share × slots`` and — the *priority holdback* — the pool's total in-flight count
  is under ``max_utilization × slots``: lower tiers stop short of full use so that headroom
  stays for Turbo arrivals, which then start at once instead of waiting for a completion.
  A tier below Standard's line leaves Standard room for its own arrivals (tier_queue.py).
* **Fairness within a tier.**  Tenants share by start-time fair queueing on tokens
  (sched/tier_queue.py).
* The holdback's headroom is sized in sched/headroom.py; the values L1 takes and gives, sched/ticket.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from turbogate.sched.codel import ControlledDelay
from turbogate.sched.concurrency import LOWER_TIERS_BAR
from turbogate.sched.headroom import Headroom, staffing_beta, whole_slots
from turbogate.sched.service_time import ServiceTime
from turbogate.sched.surge import turbo_deficit
from turbogate.sched.ticket import Admitted, Shed, State, TenantPolicy, Ticket, TierPolicy, clamp_retry
from turbogate.sched.tier_queue import (
    SHARE_ALPHA,
    TierQueue,
    count_dispatch,
    count_down,
    holdback_line,
    patient_reach,
    room_kept,
    undo_dispatch,
)
from turbogate.sched.tiers import RANK, TIERS, Tier
from turbogate.sched.turbo_supply import TurboSupply

__all__ = ["Admission", "Admitted", "Shed", "State", "TenantPolicy", "Ticket", "TierPolicy", "clamp_retry"]

#: The policy of a tenant the admission was not told of (frozen: one shared value will do).
_ANY_TENANT = TenantPolicy()
_QUEUED, _DISPATCHED, _DONE = State.QUEUED, State.DISPATCHED, State.DONE
_TOP = TIERS[0]


class Admission:
    """L1 for one pool.  See the module docstring for the policy."""

    def __init__(self, tiers: Mapping[Tier, TierPolicy], tenants: Mapping[str, TenantPolicy] | None = None, *,
                 min_samples: int = 5, tenant_counts: dict[str, int] | None = None,
                 headroom_risk: float = 0.01, headroom_staffing: bool = True) -> None:
        """``tenant_counts`` may be one dict shared by the admissions of several pools, so a
        tenant's ``max_in_flight`` holds across them."""
        self.policies: dict[Tier, TierPolicy] = {t: tiers.get(t, TierPolicy()) for t in TIERS}
        self._queue_limits = {t: p.queue_limit_s for t, p in self.policies.items()}  # read on every submit
        self.tenants: dict[str, TenantPolicy] = dict(tenants or {})
        self.holdback = True
        self._queues: dict[Tier, TierQueue] = {t: TierQueue() for t in TIERS}
        self._order = [(t, self._queues[t], self.policies[t]) for t in TIERS]
        #: The highest holdback line among the lower tiers that have one (tier_queue.py ``holdback_line``).
        self._top_line = max((p.max_utilization for t, p in self.policies.items()
                              if t is not _TOP and p.max_utilization < 1.0), default=0.0)
        #: The tier with that line (Standard): the tiers below leave room for its arrivals.
        self._kept_for = next((q for t, q, p in self._order if t is not _TOP and p.max_utilization < 1.0
                               and p.max_utilization == self._top_line), None)
        # Per tier, the queues at its rank or above (a request's predicted wait counts them).
        self._at_or_above = {t: tuple(self._queues[u] for u in TIERS[: RANK[t] + 1]) for t in TIERS}
        for _tier, queue, policy in self._order:  # nobody is owed anything before the first dispatch
            queue.share = policy.min_share
            queue.share_floor = policy.min_share * (1.0 - SHARE_ALPHA)
        self._active: dict[str, int] = tenant_counts if tenant_counts is not None else {}
        self._seq = 0
        self.in_flight = 0
        #: Tickets waiting in any tier.
        self.queued = 0
        #: Dispatch-to-completion time (another process's, until this one has measured its own).
        self.service = ServiceTime(min_samples)
        self.dispatched: dict[Tier, int] = dict.fromkeys(TIERS, 0)
        self._headroom = Headroom(headroom_risk, headroom_staffing)
        #: A replica of the pool is still in slow start (its limit counts whole in ``proven``):
        #: set by the flow before each dispatch round (sched/flow_pump.py).
        self.learning = False
        #: The lowest holdback line (share of the slots) that kept a queued tier waiting at the last
        #: decision that let nothing go (1.0: none): slow start's bar (concurrency.py ``adapt_limit``).
        self.held_share = 1.0
        # CoDel for the lower tiers with a TTFT objective (Turbo's excess is downgraded instead).
        self._codel = {t: ControlledDelay(p.ttft_slo_s, _QUEUED) for t, p in self.policies.items()
                       if p.ttft_slo_s is not None and t is not _TOP}
        self.supply = TurboSupply()
        # A downgraded Turbo request reaches past Turbo's headroom line only when it would
        # otherwise run out Standard's queue limit (its queue timer is Standard's).
        self._first_patience_s = 0.5 * self.policies[TIERS[1]].queue_limit_s

    # ---- queries -------------------------------------------------------------------------
    def queue_length(self, tier: Tier) -> int:
        return self._queues[tier].length

    def tier_in_flight(self, tier: Tier) -> int:
        return self._queues[tier].in_flight

    @property
    def service_estimate_s(self) -> float | None:
        """EWMA of dispatch-to-completion time, once trusted (sched/service_time.py)."""
        return self.service.estimate_s

    @property
    def swing_beta(self) -> float:
        """β of Turbo's own swing the headroom keeps room for, 0 where it keeps none (sched/headroom.py)."""
        return staffing_beta(self._headroom.risk) if self._headroom.staffing else 0.0

    def headroom(self, now: float, slots: int) -> int:
        """The slots the holdback keeps for Turbo's bursts right now (0 without holdback)."""
        top_rate = self._top_rate(now, slots)
        if not self._holding(now, top_rate):
            return 0
        return self._headroom.room(now, top_rate, slots, self.service_estimate_s, self.learning)

    def saturated(self) -> bool:
        """More than one lower-tier request queues (a lone one is decided alone, flow.py's fused
        path; where Relax is kept below its own line, ``_kept``, Standard's alone count)."""
        kept_for = self._kept_for
        return (kept_for.length if kept_for else self.queued - self._queues[_TOP].length) > 1

    def pressed(self) -> bool:
        """The lower tiers queue (``saturated``) or a step up in arrivals is told (sched/surge.py)."""
        return self.saturated() or self._headroom.pace.surging()

    def _top_rate(self, now: float, slots: int) -> float:  # a saturated pool's arrivals come as fast as it completes
        return self._headroom.top_rate(now, slots, self.service_estimate_s if self.saturated() else None)

    def _holding(self, now: float, top_rate: float) -> bool:
        return self.holdback and self._headroom.asked(now, top_rate)

    def _ceiling(self, now: float, base: int, top_rate: float) -> int:
        """The most the lower tiers may hold of ``base`` slots while the holdback is on: never
        more than leaves Turbo its headroom, and the slots its demand lacks (``turbo_deficit``)."""
        service = self.service_estimate_s
        # A Turbo clump is given back only while Standard does not queue and arrivals fit the slots.
        credit = self._kept_for is not None and self._kept_for.length <= 1 and self._headroom.fits(now, service, base)
        return (base - self._headroom.room(now, top_rate, base, service, self.learning)
                - turbo_deficit(top_rate, service, self._queues[_TOP].in_flight, credit))

    def snapshot(self) -> dict[str, dict[str, float]]:
        return {
            t.value: {"queued": q.length, "in_flight": q.in_flight, "dispatched": self.dispatched[t],
                      "vtime": q.vtime}
            for t, q in self._queues.items()
        }

    def _weight(self, tenant: str) -> float:
        return (self.tenants.get(tenant) or _ANY_TENANT).weight

    # ---- admission -----------------------------------------------------------------------
    def submit(self, ticket: Ticket, now: float, slots: int) -> Admitted | Shed:
        """Queue ``ticket`` or refuse it.  An admitted ticket waits for ``next_dispatch``.
        ``slots`` must be > 0: a pool without any is the caller's answer to give."""
        shed = self._admit(ticket, now, slots)
        if shed is not None:
            return shed
        self._enqueue(ticket)
        return Admitted(ticket)

    def submit_now(self, ticket: Ticket, now: float, slots: int, proven: int | None = None) -> Shed | bool:
        """``submit``, then ``next_dispatch``, fused for the usual arrival: one that finds nothing
        queued, so L1's next choice is this ticket or none.  True: it is dispatched (as
        ``next_dispatch`` would have returned it; the caller must ``requeue`` it if no replica
        can take it), False: it waits queued, or the refusal.  The same decisions and state as
        the two calls, without the heap push and pop or the walk over every tier."""
        shed = self._admit(ticket, now, slots)
        if shed is not None:
            return shed
        if self.queued == 0 and self._goes_alone(ticket.tier, now, slots, proven):
            self._start(ticket, now)
            return True
        self._enqueue(ticket)
        return False

    def _admit(self, ticket: Ticket, now: float, slots: int) -> Shed | None:
        """The refusals of ``submit``; for an admitted ticket, its fair-queueing tag and its
        tenant's count (the caller queues it, or dispatches it at once)."""
        tier = ticket.tier
        policy = self.policies[tier]
        queue = self._queues[tier]
        tenant = self.tenants.get(ticket.tenant) or _ANY_TENANT
        self._headroom.arrived(tier is _TOP, now)
        if queue is self._kept_for:
            queue.arrived(now)
        active = self._active.get(ticket.tenant, 0)
        if tenant.max_in_flight is not None and active >= tenant.max_in_flight:
            return Shed(429, "tenant_limit", self.retry_after_s(tier, slots),
                        f"tenant has {active} requests in flight, its limit is {tenant.max_in_flight}")
        if queue.length >= policy.queue_bound:
            mine = queue.queued_by_tenant.get(ticket.tenant, 0)
            if mine > 0 and mine >= queue.fair_share(ticket.tenant, policy.queue_bound, self._weight):
                return Shed(429, "tenant_share", self.retry_after_s(tier, slots),
                            f"the {tier.value} queue is full and this tenant holds {mine} of its "
                            f"{policy.queue_bound} places, more than its share")
            return Shed(503, "queue_full", self.retry_after_s(tier, slots),
                        f"the {tier.value} queue is full ({policy.queue_bound} waiting)")
        # Nothing queued and a slot free: the prediction is 0, under any budget (the usual arrival).
        predicted = self.predicted_wait_s(tier, slots) if self.queued or self.in_flight >= slots else None
        if (predicted is not None and predicted > self._queue_limits[tier] and not ticket.first
                and not self._newest_first(tier)):
            return Shed(503, "queue_time_budget", clamp_retry(predicted - policy.queue_limit_s),
                        f"expected queue time {predicted:.1f}s exceeds the {tier.value} budget "
                        f"of {policy.queue_limit_s:g}s")
        self._seq += 1
        ticket.id = self._seq
        ticket.state = _QUEUED
        queue.tag(ticket, tenant.weight)
        self._active[ticket.tenant] = active + 1
        return None

    def _newest_first(self, tier: Tier) -> bool:
        """Is ``tier``'s queue standing, or on its way (then a new arrival is served first, whatever
        waits ahead of it, and no FIFO prediction says it must be refused)?"""
        codel = self._codel.get(tier)
        return codel is not None and codel.above_since is not None

    def _enqueue(self, ticket: Ticket) -> None:
        queue = self._queues[ticket.tier]
        queue.push(ticket)
        codel = self._codel.get(ticket.tier)
        if codel is not None:
            codel.joined(ticket, queue.length)
        self.queued += 1

    def _goes_alone(self, tier: Tier, now: float, slots: int, proven: int | None) -> bool:
        """``next_dispatch``'s answer when the only queued ticket is one of ``tier``: with no
        other tier waiting there is no owed turn and no line from a tier above, so it goes while
        the pool is under the tier's holdback line and the tier under its capacity cap."""
        in_flight = self.in_flight
        self.held_share = 1.0
        if in_flight >= slots:
            return False
        policy = self.policies[tier]
        if policy.max_utilization < 1.0:
            top_rate = self._top_rate(now, slots)
            if self._holding(now, top_rate):
                base = slots if proven is None or proven > slots else proven
                line = self._line(tier, policy, now, base, self._ceiling(now, base, top_rate), self._calm(now, base))
                if in_flight >= line:
                    self.held_share = line / slots
                    return False
        return self._queues[tier].in_flight < whole_slots(policy.capacity_share, slots)

    def _line(self, tier: Tier, policy: TierPolicy, now: float, base: int, ceiling: int, calm: bool) -> int:
        """The pool's in-flight count below which ``tier`` dispatches while the holdback is on."""
        return ceiling if calm else holdback_line(policy, base, ceiling, self._top_line, self._kept(now, base, tier))

    def _calm(self, now: float, base: int) -> bool:
        """A pool learning its limits, its load below slow start's bar: the lower tiers go up to Turbo's
        ceiling, not their lines drawn on a guessed limit (which slow start would never outgrow)."""
        service = self.service_estimate_s
        return self.learning and (service is None or self._headroom.fits(now, service, LOWER_TIERS_BAR * base))

    def _kept(self, now: float, base: int, tier: Tier) -> int:
        """For a tier below Standard's line with a backlog (its oldest above its CoDel target): the
        slots of ``base`` it leaves free for Standard's arrivals (tier_queue.py ``room_kept``);
        none while ``learning``: slow start grows only on what the lower tiers run (``Headroom.room``)."""
        queue, service, codel = self._kept_for, self.service_estimate_s, self._codel.get(tier)
        if (queue is None or codel is None or not service or self.learning
                or self.policies[tier].max_utilization >= self._top_line):
            return 0
        codel.standing(self._queues[tier].head(), now)
        if codel.above_since is None:
            return 0
        return room_kept(queue, now, base, service, self._headroom.risk, self._headroom.staffing)

    def predicted_wait_s(self, tier: Tier, slots: int) -> float | None:
        """Queue time a new ``tier`` request should expect: the work queued at its rank or
        above, drained ``slots`` at a time at the observed service time."""
        service = self.service_estimate_s
        if service is None or slots <= 0:
            return None
        ahead = 0
        for queue in self._at_or_above[tier]:
            ahead += queue.length
        return (ahead + max(0, self.in_flight - slots + 1)) * service / slots

    def retry_after_s(self, tier: Tier, slots: int) -> int:
        """``Retry-After`` for a refused ``tier`` request: the predicted time for the queue
        ahead of it to drain (1 s while there is no service-time estimate yet)."""
        predicted = self.predicted_wait_s(tier, slots)
        return 1 if predicted is None else clamp_retry(predicted)

    # ---- dispatch ------------------------------------------------------------------------
    def next_dispatch(self, now: float, slots: int, proven: int | None = None, top_only: bool = False) -> Ticket | None:
        """The ticket to send upstream now, or ``None`` if none may go.  The caller must later
        call ``on_complete`` (or ``requeue`` if no replica could take it).  ``proven`` is the
        part of ``slots`` the engines have shown they run (``Picker.proven_slots``): holdback
        lines are drawn on it, so the headroom kept for Turbo is real engine capacity.
        ``top_only``: Turbo's head or none (the lower tiers' head found no replica just now)."""
        in_flight = self.in_flight
        self.held_share = 1.0
        if in_flight >= slots or self.queued == 0:
            return None
        base = slots if proven is None else min(proven, slots)
        # The most the lower tiers may hold: never more than leaves Turbo its needed headroom.
        ceiling = slots
        top_rate = self._top_rate(now, slots)
        held = self._holding(now, top_rate)
        if held:
            ceiling = self._ceiling(now, base, top_rate)
        calm = held and self._calm(now, base)
        best: Ticket | None = None
        owed: Ticket | None = None
        line_above = 0  # the holdback line of the best tier above with queued work
        for _tier, queue, policy in self._order:
            if queue.length == 0 or (top_only and _tier is not _TOP):
                continue
            line = slots
            if held and policy.max_utilization < 1.0:
                line = self._line(_tier, policy, now, base, ceiling, calm)
            due = queue.share < policy.min_share
            cap = whole_slots(policy.capacity_share, slots)
            # An owed tier takes the turn of the tier above it, with that tier's line: it never
            # reaches into headroom kept for a tier that is not waiting.
            # Turbo served Standard for want of supply (``Ticket.first``) goes first in Standard's
            # line, after any Turbo waiting, up to what leaves Turbo its headroom rather than
            # Standard's own utilization line; halfway to Standard's queue limit, into half of
            # Turbo's headroom (sched/turbo_supply.py, tier_queue.py ``patient_reach``).
            reach = max(line, line_above) if due else line
            if queue.heap[0][0] < 0.0:
                first = queue.head()
                if first is not None and first.first:
                    reach = patient_reach(slots, max(line, ceiling), now - first.arrival > self._first_patience_s)
            if in_flight >= reach and line < slots:
                self.held_share = min(self.held_share, line / slots)
            if queue.in_flight < cap and (best is None or due) and in_flight < reach:
                head = queue.head()
                codel = self._codel.get(_tier)
                if codel is not None:
                    head = codel.choose(head, now)
                if head is not None:
                    if due:
                        owed = head
                        break
                    best = head
            line_above = max(line_above, line)
        chosen = owed or best
        if chosen is None:
            return None
        self._take(chosen, now)
        return chosen

    def _take(self, ticket: Ticket, now: float) -> None:
        self._unqueue(ticket)
        self._start(ticket, now)

    def _unqueue(self, ticket: Ticket) -> None:
        """``ticket`` leaves its queue; one that empties has no arrival order to keep (sched/codel.py)."""
        queue = self._queues[ticket.tier]
        queue.left(ticket.tenant)
        self.queued -= 1
        if not queue.length and self._codel:
            codel = self._codel.get(ticket.tier)
            if codel is not None:
                codel.order.clear()

    def _start(self, ticket: Ticket, now: float) -> None:
        """``ticket`` leaves for its replica (taken off the queue, or never queued: ``submit_now``)."""
        tier = ticket.tier
        queue = self._queues[tier]
        ticket.state = _DISPATCHED
        ticket.dispatched_at = now
        queue.started(ticket)
        self.dispatched[tier] += 1
        count_dispatch(self._queues.values(), queue)
        self.in_flight += 1

    def requeue(self, ticket: Ticket, *, just_taken: bool = False) -> None:
        """Put a dispatched ticket back: it keeps its place.  ``just_taken``: taken by the last
        call and put back for want of a replica, so the shares are as before (a tier L2 holds
        back stays owed); otherwise (its replica failed it) its dispatch stays counted."""
        if ticket.state is not _DISPATCHED:
            return
        queue = self._queues[ticket.tier]
        ticket.state = _QUEUED
        ticket.dispatched_at = None
        queue.in_flight -= 1
        self.in_flight -= 1
        self.dispatched[ticket.tier] -= 1
        if just_taken:
            undo_dispatch(self._queues.values(), queue)
        queue.push(ticket)
        self.queued += 1

    def on_complete(self, ticket: Ticket, now: float, *, count_service: bool = True) -> None:
        """A dispatched ticket finished (served, failed or cancelled): free its slot."""
        if ticket.state is _DISPATCHED:
            queue = self._queues[ticket.tier]
            queue.in_flight -= 1
            self.in_flight -= 1
            if count_service and ticket.dispatched_at is not None:
                self.service.add(max(0.0, now - ticket.dispatched_at))
            ticket.state = _DONE
            count_down(self._active, ticket.tenant)
        elif ticket.state is _QUEUED:
            self.cancel(ticket)

    def recharge(self, ticket: Ticket, used: float) -> None:
        """Correct the tenant's finish tag from the cost ``ticket`` was charged to the cost it used
        (sched/fair_cost.py), never below the tier's virtual time."""
        self._queues[ticket.tier].recharge(ticket, used, self._weight(ticket.tenant))

    def cancel(self, ticket: Ticket) -> bool:
        """Withdraw a queued ticket (its client went away, or it waited too long).  True if it
        was queued."""
        if ticket.state is not _QUEUED:
            return False
        ticket.state = _DONE
        self._unqueue(ticket)
        count_down(self._active, ticket.tenant)
        return True

    def timed_out(self, ticket: Ticket, now: float, slots: int) -> Shed:
        """Withdraw a ticket that waited past its tier's queue limit and say why; Retry-After is
        the predicted drain time of what is still queued ahead at its rank."""
        self.cancel(ticket)
        limit = self.policies[ticket.tier].queue_limit_s
        return Shed(503, "queue_timeout", self.retry_after_s(ticket.tier, slots),
                    f"waited {now - ticket.arrival:.1f}s in the {ticket.tier.value} queue, over its limit "
                    f"of {limit:g}s")
