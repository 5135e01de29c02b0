"""Controlled delay for a tier with a TTFT objective: newest first once its queue has stood
(pure, ``now`` passed in).

Under a standing overload a FIFO queue with a timeout fills to the timeout: every request it
serves has waited about the whole budget, so within an interactive objective its goodput is
zero although it got its share of the slots.  CoDel's observation (Nichols & Jacobson, 2012)
is that a *standing* queue — one whose oldest request stays older than a small target for a
whole interval — is not absorbing a burst but only adding delay.  As in Facebook's
"adaptive LIFO" with CoDel, once that happens the tier is served newest first: the requests it
serves have barely waited and meet the objective, while the old ones run out their budget
(the objective itself: ``ttft_slo_s`` sets the queue budget, sched/ticket.py ``TierPolicy``) and are
refused with ``Retry-After``.  The tier returns to its fair order (start-time fair queueing)
as soon as its oldest request is younger than the target again, so a burst is still served in
order.

``target_s`` = ``TARGET_SHARE`` × the objective, ``interval_s`` = ``INTERVAL_SHARE`` × it: a
queue that has stood above a fifth of the objective for half of it cannot be a burst the
dispatch rate is about to clear.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turbogate.sched.admission import State, Ticket

TARGET_SHARE = 0.2
INTERVAL_SHARE = 0.5


class ControlledDelay:
    """One tier's standing-queue state and its arrival order (for newest-first service)."""

    __slots__ = ("_queued", "above_since", "interval_s", "order", "target_s")

    def __init__(self, ttft_slo_s: float, queued: State) -> None:
        """``queued``: the ticket state that means still waiting (admission's ``State.QUEUED``)."""
        self._queued = queued
        self.target_s = TARGET_SHARE * ttft_slo_s
        self.interval_s = INTERVAL_SHARE * ttft_slo_s
        self.above_since: float | None = None  # since when the oldest queued request is older than the target
        self.order: deque[Ticket] = deque()

    def joined(self, ticket: Ticket, length: int) -> None:
        """``ticket`` joined the tier's queue, which now holds ``length`` requests."""
        order = self.order
        while order and order[0].state is not self._queued:  # dispatched or withdrawn in arrival order
            order.popleft()
        order.append(ticket)
        if len(order) > 2 * length + 8:  # others linger in the middle: drop them
            self.order = deque(t for t in order if t.state is self._queued)

    def standing(self, oldest: Ticket | None, now: float) -> bool:
        """Has the queue stood above the target for a whole interval (``oldest``: its fair-order
        head, or None when empty)?"""
        if oldest is None or now - oldest.arrival < self.target_s:
            self.above_since = None
            if oldest is None:
                self.order.clear()  # nothing queued: nothing to remember
            return False
        if self.above_since is None:
            self.above_since = now
        return now - self.above_since >= self.interval_s

    def newest(self) -> Ticket | None:
        """The most recent arrival still queued."""
        order = self.order
        while order and order[-1].state is not self._queued:
            order.pop()
        return order[-1] if order else None

    def choose(self, oldest: Ticket | None, now: float) -> Ticket | None:
        """The tier's next ticket: its fair-order head, or the newest while the queue stands (a
        ticket marked ``first`` always goes first)."""
        if oldest is not None and oldest.first:
            return oldest
        if self.standing(oldest, now):
            return self.newest() or oldest
        return oldest
