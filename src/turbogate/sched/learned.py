"""A replica's learned concurrency limit (and its pool's service time) as text for the store, and
what a process that starts cold takes from it (pure: the wall-clock time is passed in).

A gateway restarted during an overload, or a worker or gateway process added to a fleet's
front, would otherwise learn every replica's limit again from ``initial_limit`` by slow start
— the cold start whose overshoot puts Turbo in the engines' queues.  The learned state (limit,
slow-start threshold, what the engine was seen running) is what every process sharing a store
writes for its replicas, and what one whose replica is still in slow start takes: the limit
then starts where the fleet already is (within the replica's cap and its ``max_num_seqs``), and
a queue seen afterwards still cuts it as usual (sched/concurrency.py).

The replica's measured first-token time and time per output token, which size the lower tiers'
prefill gate (sched/surge.py ``prefill_gate``), travel with it: under an overload a replica seldom
has no stream awaiting a first token, the moment they are measured in, so a process started then
takes them from the store where it has none of its own.

The batch its engine showed (``batch_seen``, sched/concurrency.py) travels too, and a process that
has seen none takes it as its own ceiling: a gateway restarted mid-overload would otherwise meet
the engines with a slow start that only their queue stops.

Text: ``"limit ssthresh proven written_at first_s step_s batch"`` (``inf`` for a threshold not
found yet, 0 for a time not measured or a batch not seen; the first four or six alone are read
too).  A state older than
``MAX_AGE_S`` is ignored: the engine may have been reconfigured since.

A pool's dispatch-to-completion time (sched/service_time.py), which sizes Turbo's headroom and
supply, goes under ``pool_key(pool)`` as ``"service_s written_at"`` and is taken, within the same
age, by a process that has measured none (``encode_pool``, ``adopt_pool``): without it a process
started during an overload keeps no room for Turbo in its first seconds.  Only what describes the
engines travels, not what one process sees of the traffic (its arrival rates: processes sharing
a store each see their own part of it).
"""

from __future__ import annotations

import math

from turbogate.sched.concurrency import limit_ceiling
from turbogate.sched.replica import Replica
from turbogate.sched.service_time import ServiceTime
from turbogate.sched.surge import regate

MAX_AGE_S = 600.0
#: Prefix of a pool's key among the replicas' (a replica's text never parses as a pool's, nor
#: the other way round, should a replica be named so).
POOL_PREFIX = "pool:"


def encode(replica: Replica, wall_now: float) -> str | None:
    """``replica``'s learned state as text, or None while it has nothing to teach (never scraped,
    or still at a slow start's beginning)."""
    if not replica.scraped or replica.load is None or (math.isinf(replica.ssthresh) and replica.proven < 1.0):
        return None
    return (f"{replica.limit:.3f} {replica.ssthresh:.3f} {replica.proven:.3f} {wall_now:.3f} "
            f"{replica.first_s:.6f} {replica.step_s:.6f} {replica.batch_seen:.0f}")


def adopt(replica: Replica, text: str, wall_now: float) -> bool:
    """Take the stored limit when ``replica`` is still in slow start (it has learned nothing of its
    own that contradicts it), and the stored times and batch when it has none; True if taken."""
    try:
        values = [float(x) for x in text.split()]
    except ValueError:
        return False
    if len(values) not in (4, 6, 7) or wall_now - values[3] > MAX_AGE_S:
        return False
    limit, ssthresh, proven = values[:3]
    timed = len(values) >= 6 and _adopt_times(replica, values[4], values[5])
    taken = _adopt_limit(replica, limit, ssthresh, proven)
    batch = len(values) == 7 and _adopt_batch(replica, values[6])
    return taken or timed or batch


def _adopt_limit(replica: Replica, limit: float, ssthresh: float, proven: float) -> bool:
    if not math.isinf(replica.ssthresh) or limit < 1.0:
        return False
    limit = min(limit, limit_ceiling(replica))
    if limit <= replica.limit and math.isinf(ssthresh):
        return False  # it knows as much of the limit already
    replica.limit = limit
    replica.ssthresh = min(ssthresh, limit) if not math.isinf(ssthresh) else limit
    replica.proven = min(max(proven, replica.proven), limit)
    return True


def _adopt_batch(replica: Replica, batch: float) -> bool:
    # as sched/concurrency.py learns it: a ceiling, and where slow start ends
    if batch < 1.0 or replica.batch_seen > 0.0 or replica.engine_seqs is not None:
        return False
    replica.batch_seen = batch
    replica.limit = max(1.0, min(replica.limit, batch))
    replica.ssthresh = min(replica.ssthresh, batch)
    return True


def _adopt_times(replica: Replica, first_s: float, step_s: float) -> bool:
    if replica.first_s > 0.0 or first_s <= 0.0 or step_s <= 0.0:
        return False
    replica.first_s, replica.step_s = first_s, step_s
    regate(replica)
    return True


def pool_key(pool: str) -> str:
    return POOL_PREFIX + pool


def encode_pool(service: ServiceTime, wall_now: float) -> str | None:
    """A pool's service-time estimate as text, or None while it has none it trusts."""
    estimate = service.estimate_s
    return None if estimate is None or estimate <= 0.0 else f"{estimate:.6f} {wall_now:.3f}"


def adopt_pool(service: ServiceTime, text: str, wall_now: float) -> bool:
    """Take the stored estimate when this process trusts none of its own; True if taken."""
    try:
        values = [float(x) for x in text.split()]
    except ValueError:
        return False
    if len(values) != 2 or not math.isfinite(values[0]) or wall_now - values[1] > MAX_AGE_S:
        return False
    return service.adopt(values[0])
