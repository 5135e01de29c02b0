"""What Turbo can be given in a pool, and what happens to the rest (pure, ``now`` passed in).

Turbo asking more than a pool can give it must be told at once: served as Standard (the
answer's ``X-Turbogate-Downgrade`` says why), never queued until its budget runs out and then
refused — by then it has waited longer than Standard would have, and longer than its objective.

What Turbo can be given is measured, not modelled: the completions a full pool makes (its
proven slots over the measured dispatch-to-completion time, sched/admission.py), less the
shares of dispatches the lower tiers that ask for any are guaranteed (``min_share``), less the
holdback's headroom for Turbo's own swing.  A token bucket at that
rate, as deep as one service time of it, passes Turbo's own bursts and stops a demand that
stays above it.  While the lower tiers queue or a surge is told, Turbo's own prefills meeting
each other bound it further (``prefill_supply_rps``): the rate at which no more than 5 % of
Turbo's prefills find a Turbo prefill under way at every replica (Erlang C over the replicas,
each Turbo stream holding one for its measured time to a first token), the bucket one prefill
per replica deep.
Independently, a Turbo request that would queue behind others for longer than Turbo's TTFT
objective (its queue budget where it has none) is served Standard at once.

While the lower tiers queue or a surge is told, what the pool can give Turbo *now* is a replica
whose prefills end soon (``prefill_clear``): one with none under way, or whose latest was sent
long enough ago that what is left of it adds no more than ``TURBO_EXTRA_WAIT`` of its time to a
first token (sched/surge.py).  Where every healthy replica's prefill has just begun, a Turbo
request sent there shares or waits out a whole prefill step (1.6-1.9x its unloaded TTFT on the
A100 fleet) and makes the next Turbo arrival's wait longer too; it is served Standard at once
(``PREFILLS_UNDER_WAY``), but only while the requests served so are being served within Turbo's
own objective (``first_wait_s``): where Standard's line keeps them seconds (a slow fleet under a
standing overload), a moment's shared step is the lesser wait.

A downgraded request goes first in Standard's line (``Ticket.first``): Standard's own queue
may stand under the same overload (sched/codel.py serves it newest first and refuses the rest
at its objective), and a paying Turbo request must not wait out Standard's objective there.

Before anything is measured (a cold gateway) nothing is downgraded: the bound would be a guess.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from turbogate.sched.replica import Health
from turbogate.sched.surge import TURBO_EXTRA_WAIT
from turbogate.sched.tiers import TIERS

if TYPE_CHECKING:
    from turbogate.sched.admission import Admission
    from turbogate.sched.picker import Picker
    from turbogate.sched.replica import Replica

_TOP = TIERS[0]

#: Downgrade reasons (``X-Turbogate-Downgrade``).
OVER_SUPPLY = "turbo_over_supply"
QUEUE_OVER_OBJECTIVE = "turbo_queue_over_objective"
PREFILLS_UNDER_WAY = "turbo_prefills_under_way"
#: Whether a Turbo request that would queue past Turbo's objective is served Standard at once.
#: Off: in a transient (a burst, a cold controller) Turbo's own queue, served first, clears
#: sooner than Standard's line would (in simulation it sent requests to be refused there).
QUEUE_RULE = False

#: The share of Turbo requests that may find a Turbo prefill under way at every replica (Turbo's
#: target is its p95: the tail it leaves is 5 %).  Erlang C over-counts it (0.1 % of the A100
#: fleet's Turbo dispatches at 2× found one), but looser bounds let Turbo's own load outgrow the
#: replicas on other fleets (docs/gateway.md, "Turbo where every replica has just begun a prefill").
PREFILL_RISK = 0.05
#: Why a request is served Standard for want of Turbo supply (``Ticket.first`` for these).
EXCESS_REASONS = frozenset({OVER_SUPPLY, QUEUE_OVER_OBJECTIVE, PREFILLS_UNDER_WAY})
#: Weight of one downgraded request's wait in Standard's line (``first_wait_s``).
FIRST_WAIT_ALPHA = 0.1


class TurboSupply:
    """One pool's Turbo supply: a token bucket at the measured rate Turbo can be given."""

    __slots__ = ("_at", "_tokens", "first_wait_s", "queue_rule", "rate_rps")

    def __init__(self) -> None:
        self._tokens = -1.0  # full at the first look
        self._at = 0.0
        self.rate_rps: float | None = None  # the supply as of the last look (None: not measured yet)
        self.queue_rule = QUEUE_RULE
        #: A downgraded request's wait in Standard's line, averaged (None: none served yet).
        self.first_wait_s: float | None = None

    def first_served(self, wait_s: float) -> None:
        """A request served Standard for want of supply left Standard's line after ``wait_s``."""
        last = self.first_wait_s
        self.first_wait_s = wait_s if last is None else last + FIRST_WAIT_ALPHA * (wait_s - last)

    def supply_rps(self, admission: Admission, proven_slots: int) -> float | None:
        """Turbo requests per second the pool can give Turbo now, or None (no bound: nothing
        measured yet, or no other tier asks):
        the rate whose occupancy (rate × service, Little's law) plus the holdback's headroom for
        its swing (β √occupancy, sched/headroom.py ``headroom_slots``) fits in the slots the
        lower tiers' guaranteed shares leave."""
        service = admission.service_estimate_s
        if service is None or service <= 0.0 or proven_slots <= 0:
            return None
        lower = [p.min_share for t, p in admission.policies.items()
                 if t is not _TOP and (admission.queue_length(t) or admission.tier_in_flight(t))]
        if not lower:
            return None  # no other tier asks for anything: Turbo may have the whole pool
        room = proven_slots * max(0.0, 1.0 - sum(lower))
        beta = admission.swing_beta
        root = (-beta + math.sqrt(beta * beta + 4.0 * room)) / 2.0  # occupancy a with a + β √a = room
        return root * root / service

    def grant(self, admission: Admission, now: float, slots: int, proven_slots: int,
              configured: bool = False, prefill_rps: float | None = None, servers: int = 1) -> str | None:
        """None: a Turbo request may be served Turbo; else why it is served Standard.
        ``prefill_rps``: what the pool's replicas (``servers``) can start prefilling
        (``prefill_supply_rps``)."""
        base = proven_slots if proven_slots < slots else slots
        rate = self.supply_rps(admission, base)
        by_prefill = prefill_rps is not None and (rate is None or prefill_rps < rate)
        if by_prefill:
            rate = prefill_rps
        self.rate_rps = rate
        if rate is None:
            return None
        objective = turbo_objective_s(admission)
        service = admission.service_estimate_s or 0.0
        # As deep as one service time of the supply where it rests on learned limits (a lower
        # estimate while probes may still raise them); where every replica's batch is configured
        # the bound is firm, and the bucket passes only Turbo's natural swing (a deeper one let a
        # surge's first seconds of Turbo fill the pool: 20-30x in the first window in simulation).
        depth = 2.0 + math.sqrt(rate * service) if configured else max(2.0, rate * service)
        if by_prefill:
            depth = min(depth, float(max(1, servers)))  # a burst one prefill per replica
        tokens = depth if self._tokens < 0.0 else min(depth, self._tokens + (now - self._at) * rate)
        self._at = now
        self._tokens = tokens
        if self.queue_rule and admission.queue_length(_TOP) > 0:
            predicted = admission.predicted_wait_s(_TOP, slots)
            if predicted is not None and predicted > objective:
                return QUEUE_OVER_OBJECTIVE
        if tokens < 1.0:
            return OVER_SUPPLY
        self._tokens = tokens - 1.0
        return None




def erlang_c(servers: int, offered: float) -> float:
    """The chance an arrival waits in an M/M/c queue with ``servers`` servers and ``offered``
    load (arrival rate × service time), by the Erlang B recursion."""
    if offered <= 0.0:
        return 0.0
    if offered >= servers:
        return 1.0
    blocked = 1.0
    for k in range(1, servers + 1):
        blocked = offered * blocked / (k + offered * blocked)
    rho = offered / servers
    return blocked / (1.0 - rho + rho * blocked)


@functools.lru_cache(maxsize=1024)
def offered_at_risk(servers: int, risk: float) -> float:
    """The offered load (erlangs) at which an arrival waits with probability ``risk`` on
    ``servers`` servers (Erlang C, bisected once per pool size: it is read per Turbo request)."""
    lo, hi = 0.0, float(servers)
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if erlang_c(servers, mid) <= risk:
            lo = mid
        else:
            hi = mid
    return lo


def prefill_supply_rps(first_s: list[float], risk: float = PREFILL_RISK) -> float | None:
    """Turbo requests per second a pool can start prefilling with no more than ``risk`` of them
    finding a Turbo prefill under way at every replica (each replica's ``first_s``: its time from
    dispatch to the first token of a stream that met none; L2 sends Turbo where fewest await one),
    or None while a replica's is not measured."""
    if not first_s or min(first_s) <= 0.0:
        return None
    servers = len(first_s)
    return offered_at_risk(servers, risk) / (sum(first_s) / servers)


def turbo_excess(admission: Admission, picker: Picker, pool: str, now: float) -> str | None:
    """For a Turbo request about to be opened on ``pool``: None (served Turbo), or the reason it
    is served Standard (first in Standard's line: ``Ticket.first``).  No bound while a replica of
    the pool is still in slow start: its capacity is not known yet (and a bound drawn on a part of
    it would send Turbo into Standard's line).  The bound by Turbo's own prefills holds while the
    lower tiers queue or a surge is told (as sched/surge.py ``keeps_clear``): at a light load the
    Turbo traffic a tenant sends is theirs to collide, and a single replica's bound (5 % of one
    prefill time) would turn a second Turbo stream in the same prefill into Standard."""
    replicas = picker.replicas(pool)
    if any(math.isinf(r.ssthresh) for r in replicas):
        return None
    slots, proven = picker.slot_counts(pool, now)
    configured = all(r.engine_seqs is not None for r in replicas)
    prefill_rps, servers = None, 1
    if admission.pressed():
        healthy = [r for r in replicas if r.health is Health.HEALTHY]
        if healthy and not any(prefill_clear(r, now) for r in healthy) and downgrades_served_in_time(admission):
            return PREFILLS_UNDER_WAY
        prefill_rps, servers = prefill_supply_rps([r.first_s for r in healthy]), len(healthy)
    return admission.supply.grant(admission, now, slots, proven, configured, prefill_rps, servers)


def prefill_clear(replica: Replica, now: float) -> bool:
    """Whether a Turbo prefill sent to ``replica`` at ``now`` would wait for little of another's:
    none awaits its first token there, or the latest sent has had all but ``TURBO_EXTRA_WAIT`` of
    the replica's time to a first token (``first_s``; not measured yet: clear, nothing is known)."""
    if replica.lower_prefills + replica.turbo_prefills == 0 or replica.first_s <= 0.0:
        return True
    return replica.last_sent + replica.first_s - now <= TURBO_EXTRA_WAIT * replica.first_s


def downgrades_served_in_time(admission: Admission) -> bool:
    """Whether requests served Standard for want of supply have lately left Standard's line within
    Turbo's TTFT objective (its queue budget where it has none)."""
    waited = admission.supply.first_wait_s
    return waited is not None and waited <= turbo_objective_s(admission)


def turbo_objective_s(admission: Admission) -> float:
    """Turbo's TTFT objective, or its queue budget where it has none."""
    policy = admission.policies[_TOP]
    return policy.ttft_slo_s if policy.ttft_slo_s is not None else policy.queue_limit_s
