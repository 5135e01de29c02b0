"""Turbo's supply bounded by its own prefills (sched/turbo_supply.py ``prefill_supply_rps``), by a
replica whose prefills end soon (``prefill_clear``), and the replica a lower tier leaves clear of
its prefills for Turbo (sched/surge.py ``keeps_clear``): pure, no clock but the one passed in."""

from __future__ import annotations

import pytest

from turbogate.sched import Health, Picker, PickerConfig, Replica, ReplicaLoad
from turbogate.sched.admission import Admission
from turbogate.sched.surge import TURBO_EXTRA_WAIT, last_clear_left
from turbogate.sched.ticket import Ticket, TierPolicy
from turbogate.sched.tiers import Tier
from turbogate.sched.turbo_supply import (
    EXCESS_REASONS,
    OVER_SUPPLY,
    PREFILL_RISK,
    PREFILLS_UNDER_WAY,
    TurboSupply,
    downgrades_served_in_time,
    erlang_c,
    prefill_clear,
    prefill_supply_rps,
    turbo_excess,
)


def test_erlang_c_matches_its_closed_forms() -> None:
    # One server: an arrival waits with the probability the server is busy.
    assert erlang_c(1, 0.3) == pytest.approx(0.3)
    # Two servers at one erlang: C = a² / (a² + 2 (1 − a/2) (1 + a)) = 1/3.
    assert erlang_c(2, 1.0) == pytest.approx(1.0 / 3.0)
    assert erlang_c(4, 0.0) == 0.0
    assert erlang_c(2, 2.5) == 1.0  # past the servers' capacity every arrival waits


def test_the_prefill_supply_is_the_rate_at_which_its_risk_waits() -> None:
    rate = prefill_supply_rps([0.1, 0.1])
    assert rate is not None
    assert erlang_c(2, rate * 0.1) == pytest.approx(PREFILL_RISK, abs=1e-6)
    # Twice as long a prefill: half the rate; more replicas: more than proportionally more.
    slower = prefill_supply_rps([0.2, 0.2])
    assert slower is not None and slower == pytest.approx(rate / 2.0)
    wider = prefill_supply_rps([0.1] * 4)
    assert wider is not None and wider > 2.0 * rate
    # Nothing measured yet (a cold replica): no bound, not a guess.
    assert prefill_supply_rps([0.1, 0.0]) is None
    assert prefill_supply_rps([]) is None


def test_turbo_beyond_its_prefill_supply_is_served_standard_at_once() -> None:
    """A burst of one prefill per replica passes; the rest of a demand above the bound is told
    at once, and the bucket refills at the bound's rate."""
    admission = Admission({})
    supply = TurboSupply()
    rate = prefill_supply_rps([0.1, 0.1])
    assert rate is not None
    granted = [supply.grant(admission, 0.0, 32, 32, prefill_rps=rate, servers=2) for _ in range(4)]
    assert granted == [None, None, OVER_SUPPLY, OVER_SUPPLY]
    assert supply.rate_rps == pytest.approx(rate)
    later = 1.0 / rate + 1e-9  # one token's refill
    assert supply.grant(admission, later, 32, 32, prefill_rps=rate, servers=2) is None
    assert supply.grant(admission, later, 32, 32, prefill_rps=rate, servers=2) == OVER_SUPPLY
    # Without a measured bound nothing is downgraded.
    assert TurboSupply().grant(admission, 0.0, 32, 32) is None


def two_dear_replicas(n: int = 2) -> tuple[Picker, list[Replica]]:
    picker = Picker(PickerConfig(stale_after_s=2.0, default_service_s=1.0))
    replicas = [picker.add(Replica(id=f"r{i}", pool="p", cap=32)) for i in range(n)]
    for r in replicas:
        picker.on_metrics(r, ReplicaLoad(running=4, waiting=0, kv_usage=0.2), 0.0)
        r.prefill_gate = 1  # one lower-tier prefill costs Turbo more than half its first token
    return picker, replicas


def test_a_lower_tier_leaves_the_last_clear_replica_to_turbo_where_prefills_are_dear() -> None:
    picker, (a, b) = two_dear_replicas()
    a.lower_prefills = 1
    assert last_clear_left([a, b])
    assert picker.pick("p", 0.1, keep_clear=True) is None  # b stays clear for Turbo
    assert picker.pick("p", 0.1) is b  # not while the lower tiers neither queue nor surge
    b.prefill_gate = 2  # a cheap prefill: Turbo can share a step with one
    assert picker.pick("p", 0.1, keep_clear=True) is b


def test_the_rule_needs_a_second_clear_replica_or_another_healthy_one() -> None:
    picker, (a, b, c) = two_dear_replicas(3)
    a.lower_prefills = 1
    assert not last_clear_left([a, b, c])  # b and c both clear: one may take a lower prefill
    assert picker.pick("p", 0.1, keep_clear=True) in (b, c)
    b.lower_prefills = 1
    assert picker.pick("p", 0.1, keep_clear=True) is None
    picker2, (d, e) = two_dear_replicas()
    d.health = Health.EJECTED
    assert not last_clear_left([d, e])  # a lone healthy replica is never held back
    assert picker2.pick("p", 0.1, keep_clear=True) is e


def test_a_replica_is_clear_for_turbo_once_what_is_left_of_its_prefill_is_small() -> None:
    _, (a, _) = two_dear_replicas()
    assert prefill_clear(a, 5.0)  # nothing under way
    a.first_s = 0.1
    a.lower_prefills, a.last_sent = 1, 5.0
    assert not prefill_clear(a, 5.01)  # 90 ms of a 100-ms first token left
    assert prefill_clear(a, 5.0 + 0.1 * (1.0 - TURBO_EXTRA_WAIT) + 1e-9)  # half of it left
    a.lower_prefills, a.turbo_prefills = 0, 1  # Turbo's own prefill counts the same
    assert not prefill_clear(a, 5.01)
    a.first_s = 0.0  # not measured yet: nothing is known, so nothing is downgraded for it
    assert prefill_clear(a, 5.01)


def test_downgrades_count_as_served_in_time_while_they_leave_standards_line_within_turbos_objective() -> None:
    admission = Admission({Tier.TURBO: TierPolicy(ttft_slo_s=1.0)})
    assert not downgrades_served_in_time(admission)  # none served yet: no evidence
    admission.supply.first_served(0.3)
    assert downgrades_served_in_time(admission)
    for _ in range(30):  # Standard's line keeps them seconds (a slow fleet under a standing overload)
        admission.supply.first_served(3.0)
    assert not downgrades_served_in_time(admission)
    first = admission.supply.first_wait_s
    assert first is not None and 1.0 < first < 3.0


def test_while_pressed_turbo_finding_every_replica_just_begun_a_prefill_is_served_standard_at_once() -> None:
    admission = Admission({Tier.TURBO: TierPolicy(ttft_slo_s=1.0)})
    for i in range(3):  # the lower tiers queue: the pool is pressed
        admission.submit(Ticket(tenant="t", tier=Tier.STANDARD, arrival=0.0, id=i), 0.0, 64)
    assert admission.pressed()
    admission.supply.first_served(0.2)
    picker, (a, b) = two_dear_replicas()
    for r in (a, b):
        r.first_s, r.ssthresh = 0.1, 32.0
        r.lower_prefills, r.last_sent = 1, 10.0
    assert turbo_excess(admission, picker, "p", 10.01) == PREFILLS_UNDER_WAY
    assert PREFILLS_UNDER_WAY in EXCESS_REASONS  # first in Standard's line
    assert turbo_excess(admission, picker, "p", 10.08) != PREFILLS_UNDER_WAY  # b's nearly done
    b.lower_prefills = 0
    assert turbo_excess(admission, picker, "p", 10.01) != PREFILLS_UNDER_WAY
    b.lower_prefills = 1
    for _ in range(30):
        admission.supply.first_served(3.0)
    assert turbo_excess(admission, picker, "p", 10.01) != PREFILLS_UNDER_WAY  # the lesser wait is Turbo's
