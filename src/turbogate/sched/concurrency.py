"""Adaptive concurrency: how many requests each replica should hold, learned from its engine.

How many requests a replica should hold is learned, not configured:
the queue — and with it the tiers' priority — must live in the gateway, not in the engine's
own FIFO.  At each scrape of an engine that reports its waiting count:

* a queue above ``queue_tolerance`` (default 0) → the limit drops to what the engine runs of
  ours (one scrape converges: 64 in flight, 48 of them waiting, gives 16), and that value
  becomes the slow-start threshold.  A small queue must be seen on two scrapes in a row: a
  request sent during an engine step shows as waiting until the step ends, and a limit that
  shrinks on such snapshots ratchets down;
* no queue, the limit reached since the last scrape (so it may be what holds us back), the
  engine seen running (nearly) that many at once, and KV use below ``saturated_kv`` → the limit
  grows: ×1.5 per scrape below the threshold (slow start), one slot every
  ``grow_every_scrapes`` above it (a rare probe), as TCP does.  Turbo avoids the probed slots
  (``pick(proven_only=True)``).  A probe that the engine answers with a queue doubles the wait
  before the next one (up to ``MAX_PROBE_BACKOFF``×); one it runs resets it: at a fleet's edge,
  the probed slot holds a lower tier's request in the engine's FIFO only now and then.

Overshoot is what hurts: a limit above what the engine runs puts requests in the engine's
FIFO, where a Turbo request waits behind Standard ones for a completion, and it erases the
holdback's headroom.  Hence no tolerance by default and slow probing above the threshold;
undershooting by a slot costs little.

``max_concurrency`` from the config is only an optional cap.  A replica without metrics
(``scraped=False``) keeps ``unscraped_limit`` (or its cap): nothing tells us its queue.

An engine whose batch limit is known (``max_num_seqs`` configured for the replica) starts at
that limit, past slow start and proven: what a quiet minute would teach (a limit slow start grew
only as far as the light load reached) must not be what a surge meets — slow start climbing
×1.5 a scrape from there overshoots the engine, whose FIFO then holds Turbo, and a cold gateway
at low load holds the lower tiers back.  The limit never exceeds it; a queue (the KV cache
binding first) still cuts it as above.

Where it is not configured, the engine tells it: a queue that counts (as above) while its KV
cache has room (below ``saturated_kv``) and it runs as many as it ever has is its batch full, so
that running count is its batch limit (``batch_seen``).  From then on the limit never exceeds it,
and no probe puts a lower tier's request in the engine's FIFO above it; the other replicas of
its pool stop slow start there (``presume_batch``).  A single small queue is not enough: a request
sent during an engine step may show as waiting until the step ends, and a ceiling taken from such
a snapshot (12 on a 16-sequence engine at half load) held the lower tiers back for good.  It only
rises (another client's load may show a larger batch), and it travels with the learned state
(sched/learned.py); an engine restarted with a larger batch is not found by probing above it,
so give such a replica its ``max_num_seqs`` (a configured batch takes nothing from the store).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from turbogate.sched.load import ReplicaLoad
from turbogate.sched.replica import PickerConfig, Replica
from turbogate.sched.surge import regate

#: The share of a limit that proves it full: below the holdback line (0.85 of the limit), so the
#: lower tiers alone can reach it.
LOWER_TIERS_BAR = 0.8

#: At most this many × ``grow_every_scrapes`` between probes of an edge already found (a minute
#: at a 0.5 s scrape interval and the default 5).
MAX_PROBE_BACKOFF = 24


def start_limit(replica: Replica, cfg: PickerConfig) -> None:
    """The limit of a replica that just joined (see the module docstring)."""
    start = cfg.initial_limit if replica.scraped else cfg.unscraped_limit
    if replica.engine_seqs is not None and replica.scraped:
        start = replica.engine_seqs
    replica.limit = float(min(start, replica.cap) if replica.cap is not None else start)
    if replica.engine_seqs is not None and replica.scraped:
        regate(replica)
        replica.ssthresh = replica.limit  # the engine's configuration proves what slow start would find
        replica.proven = replica.limit


def adapt_limit(replica: Replica, load: ReplicaLoad, cfg: PickerConfig, held: float | None = None) -> None:
    """Update ``replica``'s concurrency limit from one scrape (see the module docstring).  ``held``:
    the share of the pool's slots at which a holdback line kept a queued tier waiting since the
    replica's last scrape, if one did."""
    waiting = load.waiting
    if waiting is None:
        return
    # A request sent during an engine step shows as waiting until the step ends, so a small
    # queue proves nothing unless it is seen twice while the engine runs as many as it ever
    # has (a full engine); a large queue always counts.
    running = load.running or 0.0
    # In slow start the limit has just grown past what the engine showed it runs, so a queue is
    # most likely that overshoot: a smaller one counts at once.
    large = max(2.0, 0.1 * running) if math.isinf(replica.ssthresh) else max(4.0, 0.25 * running)
    kv = load.kv_usage
    if waiting >= large:
        excess = waiting
    elif running >= replica.proven or (kv is not None and kv > cfg.saturated_kv):
        # A full engine, or a full KV cache: one binds before a configured batch limit does
        # (long prompts on a small GPU), and it queues whatever is sent past it.
        excess = min(waiting, replica.last_waiting)
    else:
        excess = 0.0
    replica.last_waiting = waiting
    if excess > cfg.queue_tolerance and running >= max(1.0, replica.proven) and kv is not None \
            and kv < cfg.saturated_kv:  # a queue that counts, the KV cache not binding: the batch is full
        replica.batch_seen = max(replica.batch_seen, running)
    replica.proven = max(replica.proven, running)
    limit = replica.limit
    if excess > cfg.queue_tolerance:
        # What the engine runs of ours now: measured against our in-flight count at scrape
        # time, not the limit, which our in-flight may still exceed after a previous cut.  Never
        # above what it runs at all: the waiting gauge lags (vLLM counts an arrival only after
        # the next schedule), so after a burst of sends in-flight − waiting overstates the room.
        ours = replica.in_flight - (excess - cfg.queue_tolerance)
        if running >= 1.0:
            ours = min(ours, running)
        limit = max(float(cfg.min_limit), min(limit, ours))
        # Slow start may climb back to what the engine showed it runs (others' load may go).
        replica.ssthresh = max(limit, load.running or 0.0)
        if replica.probed_to and limit < replica.probed_to:
            # The probe found the engine's edge: probe it again less often (each probe puts one
            # request in the engine's own FIFO, where Turbo cannot pass it).
            replica.probe_backoff = min(MAX_PROBE_BACKOFF, 2 * replica.probe_backoff)
        replica.probed_to = 0.0
        replica.hold = cfg.grow_every_scrapes * replica.probe_backoff
        replica.proven = min(replica.proven, limit)
    elif waiting <= cfg.queue_tolerance and (load.kv_usage or 0.0) < cfg.saturated_kv:
        # Grow only on the engine's own evidence that it runs what we send (its running
        # count, not our in-flight count: ours may still be on the wire).
        if limit < replica.ssthresh:
            bar = LOWER_TIERS_BAR * limit
            if held is not None:  # its share of that line is the most the lower tiers could run here
                bar = min(bar, math.floor(held * limit))
            if replica.proven >= bar:
                # slow start: ×1.5 (a smaller overshoot than TCP's ×2), and at most half again
                # what the engine has shown it runs, so one step never overshoots by more
                limit = max(limit, min(limit * 1.5, replica.proven * 1.5, replica.ssthresh))
                if replica.batch_hint > 0.0 and limit > replica.batch_hint:
                    # another of its pool's engines queued there: probe past it a slot at a time
                    limit = max(replica.limit, replica.batch_hint)
                    replica.ssthresh = limit
                replica.slow_start_idle = 0
            else:
                replica.slow_start_idle += 1
        elif replica.proven < int(limit):
            pass  # it has not run the whole limit at once since the last cut: no reason to probe
        elif limit >= limit_ceiling(replica):
            pass  # the engine's batch is known and reached: nothing above it to probe
        elif replica.hold <= 1:  # past the threshold, probe one more now and then
            if replica.probed_to and replica.proven >= replica.probed_to:
                replica.probe_backoff = 1  # the last probe held: the engine had the room
            limit += 1.0
            replica.probed_to = limit
            replica.hold = cfg.grow_every_scrapes * replica.probe_backoff
        else:
            replica.hold -= 1
    replica.limit = max(float(cfg.min_limit), min(limit, limit_ceiling(replica)))
    replica.peak_in_flight = replica.in_flight


def limit_ceiling(replica: Replica) -> float:
    """The most the limit may be: the configured cap and batch, and the batch the engine showed."""
    ceiling = math.inf if replica.cap is None else float(replica.cap)
    if replica.engine_seqs is not None:
        ceiling = min(ceiling, float(replica.engine_seqs))
    return min(ceiling, replica.batch_seen) if replica.batch_seen > 0.0 else ceiling


def presume_batch(learned: Replica, pool: Iterable[Replica]) -> list[Replica]:
    """``learned`` has just shown its engine's batch: the other replicas of its pool with no batch
    of their own known stop slow start there (``batch_hint``): a pool's engines are most likely
    alike, and a sibling's ×1.5 step past it mid-overload is the overshoot ``batch_seen`` stops.
    One that runs it all without a queue goes on a slot a probe.  A sibling whose slow start has
    already stepped past it, and whose engine has not been seen running more, comes back to it at
    once, still in slow start: above the batch it stalls (slow start grows only once the engine
    ran 0.8 of the limit), and while it learns its slots count whole for the holdback, so the
    slots above the batch were a headroom no engine has.  Returns the replicas whose limit moved
    (their pool's counts are stale)."""
    hint = learned.batch_seen
    changed: list[Replica] = []
    for r in pool:
        if r is not learned and r.engine_seqs is None and r.batch_seen == 0.0:
            r.batch_hint = hint
            if math.isinf(r.ssthresh) and r.limit > hint >= r.proven:
                r.limit = hint
                changed.append(r)
    return changed
