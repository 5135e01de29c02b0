"""Learned per-replica limits live in the store and are shared by the processes sharing it
(issue 38 point 3): a restarted or added process whose replicas are still in slow start takes
what the others learnt instead of slow-starting from ``initial_limit``; and a pool's service
time, which sizes Turbo's headroom, where the process has measured none."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from turbogate.gateway.learned_share import give_learned, take_learned
from turbogate.sched import PickerConfig, ReplicaLoad, Tier
from turbogate.sched.admission import Admission, Admitted, Ticket
from turbogate.sched.learned import MAX_AGE_S, adopt, encode, pool_key
from turbogate.sched.picker import Picker, Replica
from turbogate.store.memory import MemoryStore
from turbogate.store.sqlite import SqliteStore


@dataclass
class Core:
    """What gateway/learned_share.py reads of the flow: its picker and each pool's admission."""

    picker: Picker
    pools: dict[str, Admission] = field(default_factory=lambda: {"p": Admission({})})

    def admissions(self) -> Iterable[tuple[str, Admission]]:
        return self.pools.items()


def learnt_picker(ids: list[str], limit_after: int) -> Picker:
    """A picker whose replicas learnt their limit: slow start grew past ``limit_after`` and a queue
    cut it back there."""
    picker = Picker(PickerConfig(initial_limit=8))
    for rid in ids:
        r = picker.add(Replica(id=rid, pool="p"))
        r.limit = float(limit_after + 4)  # slow start's last step overshot the engine
        r.in_flight = limit_after + 4
        picker.on_metrics(r, ReplicaLoad(running=limit_after, waiting=4, kv_usage=0.5), 1.0)
        assert not math.isinf(r.ssthresh) and r.limit == limit_after
    return picker


def cold_picker(ids: list[str], **kw: int) -> Picker:
    picker = Picker(PickerConfig(initial_limit=8))
    for rid in ids:
        picker.add(Replica(id=rid, pool="p", **kw))  # type: ignore[arg-type]
    return picker


def test_a_cold_replica_adopts_what_another_process_learnt() -> None:
    learnt = learnt_picker(["a"], 13).get("a")
    text = encode(learnt, 1000.0)
    assert text is not None
    cold = cold_picker(["a"]).get("a")
    assert cold.limit == 8 and math.isinf(cold.ssthresh)
    assert adopt(cold, text, 1001.0)
    assert cold.limit == 13 and cold.ssthresh == 13 and cold.proven == 13


def test_what_a_replica_learnt_itself_and_stale_or_bad_text_are_kept_out() -> None:
    text = encode(learnt_picker(["a"], 13).get("a"), 1000.0)
    assert text is not None
    own = learnt_picker(["a"], 5).get("a")  # past slow start: its own cut stands
    assert not adopt(own, text, 1001.0) and own.limit == 5
    cold = cold_picker(["a"]).get("a")
    assert not adopt(cold, text, 1000.0 + MAX_AGE_S + 1) and cold.limit == 8
    assert not adopt(cold, "not numbers", 1000.0)
    capped = cold_picker(["a"], cap=10).get("a")
    assert adopt(capped, text, 1001.0) and capped.limit == 10  # within the replica's own cap
    fresh = Replica(id="x", pool="p")
    assert encode(fresh, 1000.0) is None  # never scraped: nothing to teach


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_limits_go_through_the_store_to_a_restarted_process(kind: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        store = MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "s.sqlite3")
        await store.open()
        try:
            before = Core(learnt_picker(["a", "b"], 11))
            served = before.pools["p"]
            for i in range(5):  # the pool's service time, measured
                served.on_complete(_queued(served), 2.0 + 0.1 * i)
            await give_learned(before, store)
            assert set(await store.learned_limits()) == {"a", "b", pool_key("p")}
            after = Core(cold_picker(["a", "b", "c"]))
            assert after.pools["p"].service_estimate_s is None
            assert await take_learned(after, store) == 3
            assert [after.picker.get(r).limit for r in ("a", "b", "c")] == [11, 11, 8]
            assert after.pools["p"].service_estimate_s == before.pools["p"].service_estimate_s
            assert await take_learned(after, store) == 0  # taken once: no longer in slow start, measured
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_replica_whose_batch_is_known_takes_the_prefill_times_it_has_not_measured() -> None:
    """Its limit starts at ``max_num_seqs`` (nothing to take), but the times that size the lower
    tiers' prefill gate are measured only while no stream awaits a first token there, seldom
    under an overload: a process started then takes them (sched/learned.py, sched/surge.py)."""
    learnt = learnt_picker(["a"], 13).get("a")
    learnt.first_s, learnt.step_s = 0.078, 0.0125
    text = encode(learnt, 1000.0)
    assert text is not None
    cold = cold_picker(["a"]).get("a")
    cold.engine_seqs = 32
    cold.ssthresh = cold.limit = 32.0  # as start_limit leaves a replica whose batch is known
    cold.prefill_gate = 4
    assert adopt(cold, text, 1001.0)
    assert (cold.first_s, cold.step_s, cold.prefill_gate, cold.limit) == (0.078, 0.0125, 1, 32.0)
    assert not adopt(cold, text, 1002.0)  # its own measures from now on
    older = cold_picker(["a"]).get("a")
    assert adopt(older, " ".join(text.split()[:4]), 1001.0)  # a store written without the times
    assert older.limit == 13 and older.first_s == 0.0


def _queued(admission: Admission) -> Ticket:
    """A Standard request queued and dispatched at 0 on ``admission``'s 8 slots."""
    assert isinstance(admission.submit(Ticket("t", Tier.STANDARD, 0.0), 0.0, 8), Admitted)
    ticket = admission.next_dispatch(0.0, 8)
    assert ticket is not None
    return ticket
