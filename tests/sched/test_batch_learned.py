"""The engine's batch limit, learnt where ``max_num_seqs`` is not configured (sched/concurrency.py
``batch_seen``, ``presume_batch``; sched/learned.py carries it): the limit never exceeds what the
engine showed it runs once it queued with room in its KV cache, and the pool's other replicas
stop slow start there.  Pure core, scrapes by hand."""

from __future__ import annotations

import math

from turbogate.sched import Picker, PickerConfig, Replica, ReplicaLoad
from turbogate.sched.concurrency import adapt_limit
from turbogate.sched.learned import adopt, encode

SEQS = 16  # the fake engine's batch, never told to the gateway


def scrape(r: Replica, cfg: PickerConfig, kv: float = 0.14) -> None:
    """The gateway keeps ``r`` full (a lower tier's backlog); the engine runs at most SEQS."""
    r.in_flight = int(r.limit)
    adapt_limit(r, ReplicaLoad(running=float(min(r.in_flight, SEQS)), waiting=float(max(0, r.in_flight - SEQS)),
                               kv_usage=kv), cfg)


def test_the_limit_never_exceeds_the_batch_the_engine_showed() -> None:
    """Slow start overshoots once and a queue with KV room cuts it; from then on, scrape after scrape
    of a full engine with nothing waiting (the FIFO drained), the limit stays at the batch: no
    probe above it puts a lower tier's request in the engine's FIFO, where Turbo would wait."""
    cfg = PickerConfig()
    r = Replica(id="r", pool="p")
    for _ in range(10):
        scrape(r, cfg)
    assert r.limit == SEQS
    for _ in range(100):
        r.in_flight = SEQS
        adapt_limit(r, ReplicaLoad(running=float(SEQS), waiting=0.0, kv_usage=0.14), cfg)
        assert r.limit <= SEQS


def test_a_queue_of_a_full_kv_cache_teaches_no_batch() -> None:
    cfg = PickerConfig()
    r = Replica(id="r", pool="p")
    r.limit, r.in_flight, r.proven = 24.0, 24, 12.0
    adapt_limit(r, ReplicaLoad(running=12.0, waiting=12.0, kv_usage=0.95), cfg)  # KV-bound: lengths, not the batch
    assert r.limit == 12 and r.batch_seen == 0.0


def test_one_small_queue_is_no_batch() -> None:
    """A request sent during an engine step shows as waiting until the step ends: one snapshot of
    it at low load is not the engine's batch."""
    cfg = PickerConfig()
    r = Replica(id="r", pool="p")
    r.limit, r.in_flight, r.proven = 13.5, 13, 9.0
    adapt_limit(r, ReplicaLoad(running=12.0, waiting=1.0, kv_usage=0.1), cfg)
    assert r.batch_seen == 0.0


def test_the_pool_s_other_replicas_stop_slow_start_at_the_batch_one_showed() -> None:
    picker = Picker(PickerConfig())
    a, b = picker.add(Replica(id="a", pool="p")), picker.add(Replica(id="b", pool="p"))
    a.limit, a.in_flight, a.proven = 22.0, 22, 15.0
    picker.on_metrics(a, ReplicaLoad(running=16.0, waiting=6.0, kv_usage=0.14), 0.0)
    assert a.batch_seen == 16 and a.limit == 16
    b.limit, b.in_flight, b.proven = 16.0, 16, 15.0  # still in slow start: ×1.5 would make it 24
    picker.on_metrics(b, ReplicaLoad(running=16.0, waiting=0.0, kv_usage=0.14), 1.0)
    assert b.limit == 16 and b.ssthresh == 16 and b.batch_seen == 0.0  # past it a slot a probe


def test_a_sibling_already_past_the_batch_comes_back_to_it() -> None:
    """A sibling whose slow start stepped past the batch before another replica showed it (20 on a
    16-sequence engine, in the same second) comes back to it at once: else it stalls there, its
    slots counted whole for the holdback, four of them a headroom no engine has.  One whose engine
    was seen running more keeps its limit: the hint is not its batch."""
    picker = Picker(PickerConfig())
    a, b, c = (picker.add(Replica(id=n, pool="p")) for n in "abc")
    b.limit, b.proven = 20.0, 13.0  # stepped ×1.5 from 13 at its own scrape, still in slow start
    c.limit, c.proven = 24.0, 18.0  # ran 18 at once: a larger engine
    a.limit, a.in_flight, a.proven = 22.0, 22, 15.0
    picker.on_metrics(a, ReplicaLoad(running=16.0, waiting=6.0, kv_usage=0.14), 0.0)
    assert a.batch_seen == 16
    assert b.limit == 16 and math.isinf(b.ssthresh)  # still learning: slots count whole, Turbo's room as before
    assert c.limit == 24


def test_the_batch_travels_with_the_learned_state() -> None:
    cfg = PickerConfig()
    learnt = Replica(id="r", pool="p")
    for _ in range(10):
        scrape(learnt, cfg)
    learnt.load = ReplicaLoad(running=float(SEQS), waiting=0.0, kv_usage=0.14)
    text = encode(learnt, 1000.0)
    assert text is not None
    cold = Replica(id="r", pool="p")
    assert math.isinf(cold.ssthresh) and adopt(cold, text, 1001.0)
    assert cold.batch_seen == SEQS and cold.limit == SEQS and cold.ssthresh == SEQS
    assert adopt(Replica(id="r", pool="p"), " ".join(text.split()[:6]), 1001.0)  # a store written without it
    configured = Replica(id="r", pool="p", engine_seqs=8)
    adopt(configured, text, 1001.0)
    assert configured.batch_seen == 0.0  # its configuration says more


def test_a_small_queue_behind_a_full_kv_cache_cuts_a_configured_limit() -> None:
    """A configured batch (64) is proven from the start, but long prompts on a small GPU fill the
    KV cache at 35: a small queue seen twice with the cache full is that edge, and cuts the limit
    to what the engine runs (else every request sent past it waits in the engine's FIFO)."""
    cfg = PickerConfig()
    r = Replica(id="r", pool="p", engine_seqs=64)
    r.limit, r.proven, r.ssthresh, r.in_flight = 64.0, 64.0, 64.0, 38
    full = ReplicaLoad(running=35.0, waiting=3.0, kv_usage=0.97)
    adapt_limit(r, full, cfg)
    assert r.limit == 64  # once may be a request sent mid-step
    adapt_limit(r, full, cfg)
    assert r.limit == 35 and r.batch_seen == 0.0  # the cache's edge, not the batch
    r2 = Replica(id="r2", pool="p", engine_seqs=64)
    r2.limit, r2.proven, r2.ssthresh, r2.in_flight = 64.0, 64.0, 64.0, 38
    for _ in range(2):
        adapt_limit(r2, ReplicaLoad(running=35.0, waiting=3.0, kv_usage=0.5), cfg)
    assert r2.limit == 64  # a queue below a full batch with KV room: requests caught mid-step
