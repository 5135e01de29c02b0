"""A pool's service time through the store (sched/learned.py ``encode_pool`` / ``adopt_pool``,
sched/service_time.py): taken by a process that has measured none, and only then."""

from __future__ import annotations

from turbogate.sched.learned import MAX_AGE_S, adopt, adopt_pool, encode_pool
from turbogate.sched.replica import Replica
from turbogate.sched.service_time import ServiceTime


def measured(*samples: float) -> ServiceTime:
    service = ServiceTime(min_samples=3)
    for s in samples:
        service.add(s)
    return service


def test_a_process_that_measured_none_takes_the_stored_service_time_and_then_learns_on() -> None:
    text = encode_pool(measured(2.0, 2.0, 2.0), 1000.0)
    assert text is not None
    cold = measured(9.0)  # one sample of its own: not trusted yet
    assert cold.estimate_s is None
    assert adopt_pool(cold, text, 1001.0) and cold.estimate_s == 2.0
    cold.add(3.0)  # its own samples move the estimate as usual
    assert cold.estimate_s == 2.0 + 0.2 * (3.0 - 2.0)
    assert not adopt_pool(cold, encode_pool(measured(5.0, 5.0, 5.0), 1002.0) or "", 1002.0)


def test_what_a_process_measured_itself_and_stale_or_foreign_text_are_kept_out() -> None:
    text = encode_pool(measured(2.0, 2.0, 2.0), 1000.0)
    assert text is not None
    own = measured(4.0, 4.0, 4.0)
    assert not adopt_pool(own, text, 1001.0) and own.estimate_s == 4.0
    cold = ServiceTime(min_samples=3)
    assert not adopt_pool(cold, text, 1000.0 + MAX_AGE_S + 1)
    assert not adopt_pool(cold, "not numbers", 1000.0)
    assert not adopt_pool(cold, "0 1000", 1000.0) and not adopt_pool(cold, "nan 1000", 1000.0)
    assert encode_pool(cold, 1000.0) is None  # nothing trusted: nothing to teach
    # A replica's text and a pool's never pass for each other (a replica named like a pool's key).
    replica_text = "13.000 13.000 13.000 1000.000 0.078000 0.012500"
    assert not adopt_pool(cold, replica_text, 1001.0) and cold.estimate_s is None
    assert not adopt(Replica(id="x", pool="p"), text, 1001.0)
