"""After a burst, Standard is back at its own TTFT while Relax's backlog drains (issue 43).

A 10× burst leaves Relax a backlog that drains or expires for a minute.  While it lasts Relax
fills the pool up to its holdback line, so Standard's arrivals find free only the slots between
Relax's line and Standard's: when those are fewer than Standard's own swing, Standard waits for
completions, and its TTFT is slow again long after its first window back
(benchmarks/overload_soak.py).  Relax stops short of the room Standard's arrivals need
while its own queue stands (sched/tier_queue.py ``room_kept``, sched/admission.py ``_kept``).
Pure core: admission alone, then the toy fleet.
"""

from __future__ import annotations

import heapq
import math

from turbogate.config import parse_config
from turbogate.configpolicy import flow_policy
from turbogate.sched import Admission, Admitted, Flow, PoolSpec, ReplicaSpec, Ticket, Tier, TierPolicy

from .toy_fleet import Served, capacity, run_toy

T, S, R = Tier.TURBO, Tier.STANDARD, Tier.RELAX
#: The default tiers (config_tenants.py): Standard's line at 0.85, Relax's at 0.7.
POLICIES = {
    T: TierPolicy(queue_budget_s=5.0, ttft_slo_s=1.0),
    S: TierPolicy(capacity_share=0.9, max_utilization=0.85, min_share=0.2, queue_budget_s=5.0, ttft_slo_s=5.0),
    R: TierPolicy(capacity_share=0.5, max_utilization=0.7, min_share=0.05, queue_budget_s=60.0, ttft_slo_s=60.0),
}


def submit(adm: Admission, tier: Tier, now: float, slots: int, waited: float = 0.0) -> Ticket:
    ticket = Ticket("a", tier, now - waited)
    assert isinstance(adm.submit(ticket, now, slots), Admitted)
    return ticket


def steady_then_relax_backlog(turbo_in_7: int) -> tuple[Admission, float, list[Ticket]]:
    """7 arrivals a second for 30 s on 32 slots, ``turbo_in_7`` of every 7 Turbo and the rest
    Standard, each dispatched at once and done 1.5 s later; then a Relax backlog (its oldest 20 s
    old, past its CoDel target: a burst's) takes what it may.  The admission, the time, the backlog."""
    adm, slots, service = Admission(POLICIES), 32, 1.5
    done: list[tuple[float, int, Ticket]] = []
    now, step = 0.0, 0
    while now < 30.0:
        while done and done[0][0] <= now:
            adm.on_complete(heapq.heappop(done)[2], now)
        ticket = submit(adm, T if step % 7 < turbo_in_7 else S, now, slots)
        assert adm.next_dispatch(now, slots) is ticket
        heapq.heappush(done, (now + service, step, ticket))
        step += 1
        now += 1.0 / 7.0
    backlog = [submit(adm, R, now, slots, waited=20.0) for _ in range(200)]
    while adm.next_dispatch(now, slots) is not None:
        pass
    return adm, now, backlog


def test_a_relax_backlog_leaves_standard_room_for_its_swing() -> None:
    """Standard at 5/s and Turbo at 2/s on 32 slots, each served in 1.5 s; then a Relax backlog
    (its oldest 20 s old, past its CoDel target: a burst's) takes what it may.  A clump of
    Standard arrivals as large as its natural swing (square-root staffing at the holdback's
    wait risk: 7 here, where the lines are 5 slots apart) still starts at once: none waits."""
    adm, now, backlog = steady_then_relax_backlog(turbo_in_7=2)
    slots, service = 32, 1.5
    assert any(t.dispatched_at is not None for t in backlog)  # Relax runs, short of Standard's room
    swing = math.ceil(adm.swing_beta * math.sqrt(5.0 * service))
    clump = [submit(adm, S, now, slots) for _ in range(swing)]
    started = [adm.next_dispatch(now, slots) for _ in clump]
    assert started == clump, f"{sum(t is not None for t in started)} of {swing} started at once"


BASE_MIX = {T: 0.3, S: 0.5, R: 0.2}
BURST_MIX = {T: 0.05, S: 0.75, R: 0.2}
BURST_FROM, BURST_TO, UNTIL = 60.0, 90.0, 160.0
#: Standard's burst backlog is refused within its 5-s queue budget; from this long after the
#: burst every request is judged.
SETTLED_S = 12.0


def burst(seqs: int, replicas: int, configured: bool, seed: int) -> tuple[float, list[Served], float, list[Served]]:
    """Half the toy fleet's capacity (the benchmark's mix), with 10× more (its burst's mix) from
    60 to 90 s: Standard's and Turbo's p95 TTFT before the burst and their requests from
    ``SETTLED_S`` after it.  ``configured``: each replica's batch is in the config, else learnt."""
    config = parse_config({
        "tenants": [{"name": "t", "key_sha256": "0" * 64, "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "p", "models": ["m"], "replicas": [{"url": "http://x"}]}],
    })
    pool = PoolSpec("p", ("m",), tuple(ReplicaSpec(f"r{i}", max_num_seqs=seqs if configured else None)
                                       for i in range(replicas)))
    flow = Flow(flow_policy(config, pools=[pool]))
    cap = capacity(seqs, replicas)

    def bursting(now: float) -> bool:
        return BURST_FROM <= now < BURST_TO

    def mix(now: float) -> dict[Tier, float]:
        return {t: (0.5 * BASE_MIX[t] + 10.0 * BURST_MIX[t]) / 10.5 for t in BASE_MIX} if bursting(now) else BASE_MIX

    records = run_toy(flow, replicas=replicas, seqs=seqs, mix=mix, rate=lambda now: cap * (10.5 if bursting(now)
                      else 0.5), until=UNTIL, seed=seed, first_at=0.01)

    def p95_before(tier: Tier) -> float:
        ttfts = sorted(r.ttft if r.ttft is not None else math.inf for r in records
                       if r.asked is tier and 20.0 <= r.arrival < BURST_FROM)
        return ttfts[int(0.95 * len(ttfts))]

    def after(tier: Tier) -> list[Served]:
        return [r for r in records if r.asked is tier and r.arrival >= BURST_TO + SETTLED_S]

    return p95_before(S), after(S), p95_before(T), after(T)


def test_standard_stays_back_at_its_own_ttft_while_relax_s_backlog_drains() -> None:
    """Two fleets, batch configured or learnt, three seeds each: from 12 s after the burst to 70 s
    after it, at most one Standard request in a hundred has a TTFT over 2× Standard's p95 before
    the burst (a 4-s window of the benchmark holds about twenty: one such request makes it slow),
    and no Turbo request over 2× Turbo's."""
    slow = total = turbo_slow = 0
    for seqs, replicas, configured in ((16, 2, True), (16, 2, False), (8, 4, False)):
        for seed in (1, 2, 3):
            std_ref, std, turbo_ref, turbo = burst(seqs, replicas, configured, seed)
            total += len(std)
            slow += sum(1 for r in std if r.ttft is None or r.ttft > 2.0 * std_ref)
            turbo_slow += sum(1 for r in turbo if r.ttft is None or r.ttft > 2.0 * turbo_ref)
    assert total > 2000
    assert slow <= 0.01 * total, (slow, total)
    assert turbo_slow == 0


def test_a_turbo_clump_beside_a_relax_backlog_does_not_hold_standard_at_the_ceiling() -> None:
    """Turbo at 3/s and Standard at 4/s on 32 slots, each served in 1.5 s; a Relax backlog takes
    what it may; then seven Turbo arrivals in 0.86 s (about 2.6 expected), all started at once.
    Turbo now holds its clump, more than a standard deviation above its expected occupancy: the
    ceiling no longer keeps Turbo's whole swing free on top of it (sched/surge.py
    ``turbo_deficit``), so the next Standard arrival, 0.5 s later, starts at once."""
    adm, now, backlog = steady_then_relax_backlog(turbo_in_7=3)
    slots = 32
    assert any(t.dispatched_at is not None for t in backlog)
    for _ in range(7):
        now += 0.86 / 7
        clump = submit(adm, T, now, slots)
        assert adm.next_dispatch(now, slots) is clump
    now += 0.5
    standard = submit(adm, S, now, slots)
    assert adm.next_dispatch(now, slots) is standard
