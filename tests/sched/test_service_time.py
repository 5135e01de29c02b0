"""The pool's service time follows the engines' pace (sched/service_time.py ``TokenPace``): a surge
slows every stream at once, long before the requests it slowed complete."""

from __future__ import annotations

import pytest

from tests.sched.test_flow import policy
from turbogate.sched import Flow, ReplicaLoad, ScrapeFailed
from turbogate.sched.service_time import PACE_MIN_TOKENS, ServiceTime, TokenPace


def counters(itl_sum_s: float, tokens: float) -> ReplicaLoad:
    return ReplicaLoad(running=1, waiting=0, kv_usage=0.1, itl_sum_s=itl_sum_s, itl_tokens=tokens)


def test_the_pace_is_the_latest_interval_of_every_replica_token_weighted() -> None:
    pace = TokenPace()
    pace.read("a", counters(10.0, 1000))
    assert pace.seconds is None  # one reading is no interval
    pace.read("a", counters(10.2, 1010))  # 20 ms a token
    pace.read("b", counters(0.0, 0))
    pace.read("b", counters(0.3, 10))  # 30 ms a token
    assert pace.seconds == pytest.approx(0.5 / 20)
    pace.read("a", counters(10.8, 1020))  # a's next interval replaces its last: 60 ms a token
    assert pace.seconds == pytest.approx(0.9 / 20)


def test_too_few_tokens_a_failed_scrape_or_a_restarted_engine_say_nothing() -> None:
    pace = TokenPace()
    pace.read("a", counters(1.0, 100))
    pace.read("a", counters(1.1, 100 + PACE_MIN_TOKENS - 1))
    assert pace.seconds is None
    pace.read("a", counters(1.5, 120))
    assert pace.seconds is not None
    pace.read("a", None)  # failed: out until two scrapes read counters again
    assert pace.seconds is None
    pace.read("a", counters(2.0, 140))
    assert pace.seconds is None
    pace.read("a", counters(0.1, 10))  # the counters went back: a restarted engine, a new mark
    assert pace.seconds is None
    pace.read("a", counters(0.5, 30))
    assert pace.seconds == pytest.approx(0.4 / 20)
    pace.read("a", ReplicaLoad(running=1))  # an engine without the histogram
    assert pace.seconds is None


def paced(service: ServiceTime, per_token_s: float, at: list[float]) -> None:
    """One scrape interval of 100 tokens at ``per_token_s`` on replica "a" (``at``: its counters)."""
    at[0] += 100 * per_token_s
    at[1] += 100
    service.paced("a", counters(at[0], at[1]))


def test_the_estimate_grows_with_the_pace_at_once_and_never_shrinks_with_it() -> None:
    service, at = ServiceTime(min_samples=2), [0.0, 0.0]
    service.paced("a", counters(0.0, 0.0))
    paced(service, 0.02, at)
    service.add(1.0)
    service.add(1.0)
    assert service.estimate_s == 1.0
    paced(service, 0.05, at)  # the batches filled: 2.5 × slower tokens, before any slow completion
    assert service.estimate_s == pytest.approx(2.5)
    service.add(2.5)  # what completes at the new pace moves the reference towards it
    assert service.estimate_s == pytest.approx(service.value * 0.05 / (0.02 + 0.2 * 0.03))
    paced(service, 0.01, at)  # faster than the samples ran: the completions say so soon enough
    assert service.estimate_s == service.value


def test_an_adopted_estimate_is_not_scaled_until_this_process_samples_a_pace() -> None:
    service = ServiceTime(min_samples=2)
    service.paced("a", counters(0.0, 0.0))
    service.paced("a", counters(5.0, 100))
    assert service.adopt(3.0) and service.estimate_s == 3.0  # measured at whatever pace the other process saw


def test_the_flow_feeds_each_pools_pace_from_its_scrapes() -> None:
    flow = Flow(policy(replicas=2))
    service = dict(flow.admissions())["p"].service
    flow.scraped("r0", counters(1.0, 100), 1.0)
    flow.scraped("r1", counters(1.0, 100), 1.0)
    flow.scraped("r0", counters(3.0, 200), 2.0)
    flow.scraped("r1", counters(2.0, 200), 2.0)
    assert service.pace_s == pytest.approx(3.0 / 200)
    flow.scraped("r0", ScrapeFailed("timeout"), 3.0)
    assert service.pace_s == pytest.approx(1.0 / 100)
