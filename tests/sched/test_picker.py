"""L2 replica choice: bands, steering, staleness, ejection and re-probe, scale-out (pure)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbogate.sched import Band, Health, Picker, PickerConfig, Replica, ReplicaLoad

CFG = PickerConfig(stale_after_s=2.0, eject_after_failures=2, probe_backoff_s=1.0, probe_backoff_max_s=4.0,
                   scale_out_after_s=10.0, default_service_s=1.0)


def fleet(n: int = 2, cap: int | None = 8) -> tuple[Picker, list[Replica]]:
    picker = Picker(CFG)
    return picker, [picker.add(Replica(id=f"r{i}", pool="p", cap=cap)) for i in range(n)]


def test_bands_follow_kv_and_expected_queue() -> None:
    picker, (r, _) = fleet()
    cases = [
        (ReplicaLoad(running=2, waiting=0, kv_usage=0.3), Band.LIGHT),
        (ReplicaLoad(running=2, waiting=0, kv_usage=0.7), Band.BUSY),
        (ReplicaLoad(running=2, waiting=0, kv_usage=0.9), Band.SATURATED),
        # waiting 1 × 1 s service / 4 running = 250 ms expected queue: busy
        (ReplicaLoad(running=4, waiting=1, kv_usage=0.1), Band.BUSY),
        # waiting 4 × 1 s / 4 = 1 s: saturated
        (ReplicaLoad(running=4, waiting=4, kv_usage=0.1), Band.SATURATED),
    ]
    for load, band in cases:
        picker.on_metrics(r, load, 10.0)
        assert picker.band(r, 10.5) is band, load


def test_stale_or_missing_metrics_count_as_saturated() -> None:
    picker, (r, _) = fleet()
    assert picker.band(r, 0.0) is Band.SATURATED
    picker.on_metrics(r, ReplicaLoad(running=0, waiting=0, kv_usage=0.0), 1.0)
    assert picker.band(r, 2.9) is Band.LIGHT
    assert picker.band(r, 3.1) is Band.SATURATED


def test_steers_away_from_saturated_while_others_exist() -> None:
    picker, (a, b) = fleet()
    picker.on_metrics(a, ReplicaLoad(running=8, waiting=20, kv_usage=0.95), 0.0)
    picker.on_metrics(b, ReplicaLoad(running=6, waiting=0, kv_usage=0.5), 0.0)
    chosen = [picker.pick("p", 0.1) for _ in range(20)]
    assert set(chosen) == {b}
    picker.on_metrics(b, ReplicaLoad(running=8, waiting=20, kv_usage=0.99), 0.2)
    assert picker.pick("p", 0.3) in (a, b)  # all saturated: still served, not refused


def test_busy_replica_gets_lower_weight_than_light() -> None:
    picker, (a, b) = fleet()
    picker.on_metrics(a, ReplicaLoad(running=2, waiting=0, kv_usage=0.7), 0.0)  # busy, ratio .25 × 2
    picker.on_metrics(b, ReplicaLoad(running=3, waiting=0, kv_usage=0.2), 0.0)  # light, ratio .375
    assert picker.pick("p", 0.1) is b


def test_own_in_flight_spreads_load_and_caps_concurrency() -> None:
    picker, reps = fleet(2, cap=2)
    for r in reps:
        picker.on_metrics(r, ReplicaLoad(running=0, waiting=0, kv_usage=0.0), 0.0)
    taken = []
    for _ in range(4):
        r = picker.pick("p", 0.1)
        assert r is not None
        picker.on_dispatch(r)
        taken.append(r.id)
    assert sorted(taken) == ["r0", "r0", "r1", "r1"]
    assert picker.pick("p", 0.1) is None
    picker.on_response(reps[0], 200, 0.5, 0.2)
    assert picker.pick("p", 0.2) is reps[0]


def test_a_replica_without_metrics_gives_turbo_its_whole_limit() -> None:
    """No scrape means no engine view and no limit probe: Turbo may fill what the lower tiers may
    (it stopped at the initial limit, 8, of an unscraped replica's 64)."""
    picker = Picker(CFG)
    plain = picker.add(Replica(id="plain", pool="p", scraped=False))
    assert int(plain.limit) == CFG.unscraped_limit > CFG.initial_limit
    for _ in range(CFG.unscraped_limit):
        chosen = picker.pick("p", 0.1, proven_only=True)
        assert chosen is plain
        picker.on_dispatch(plain)
    assert picker.pick("p", 0.1, proven_only=True) is None  # full: its limit holds for Turbo too


def test_exclude_for_retry() -> None:
    picker, (a, b) = fleet()
    for r in (a, b):
        picker.on_metrics(r, ReplicaLoad(running=0, waiting=0, kv_usage=0.0), 0.0)
    assert picker.pick("p", 0.1, exclude={"r0"}) is b
    assert picker.pick("p", 0.1, exclude={"r0", "r1"}) is None


def test_hard_failure_ejects_then_probe_brings_back() -> None:
    picker, (a, b) = fleet()
    picker.on_dispatch(a)
    picker.on_failure(a, 5.0, hard=True)
    assert a.health is Health.EJECTED and a.in_flight == 0
    assert picker.slots("p", 5.0) == picker.replica_slots(b, 5.0)
    for _ in range(5):
        assert picker.pick("p", 5.1) is b
    assert picker.due_probes(5.5) == []
    assert picker.due_probes(6.0) == [a]
    assert picker.due_probes(6.1) == []  # not handed out twice while its probe runs
    picker.on_probe(a, False, 6.2)
    assert a.backoff_s == 2.0 and picker.due_probes(7.0) == []
    assert picker.due_probes(8.2) == [a]
    picker.on_probe(a, True, 8.3)
    assert a.health is Health.HEALTHY
    picker.on_metrics(a, ReplicaLoad(running=0, waiting=0, kv_usage=0.0), 8.4)
    picker.on_metrics(b, ReplicaLoad(running=5, waiting=0, kv_usage=0.4), 8.4)
    assert picker.pick("p", 8.5) is a


def test_soft_failures_eject_after_threshold() -> None:
    picker, (a, _) = fleet()
    picker.on_failure(a, 0.0, hard=False, dispatched=False)
    assert a.health is Health.HEALTHY
    picker.on_failure(a, 0.1, hard=False, dispatched=False)
    assert a.health is Health.EJECTED


def test_probe_backoff_is_capped() -> None:
    picker, (a, _) = fleet()
    picker.on_failure(a, 0.0, hard=True)
    now = 0.0
    for _ in range(6):
        now += 10
        assert picker.due_probes(now) == [a]
        picker.on_probe(a, False, now)
    assert a.backoff_s == CFG.probe_backoff_max_s


def test_slots_follow_the_learned_limit_saturation_and_staleness() -> None:
    picker, (a, _) = fleet(cap=8)
    assert picker.replica_slots(a, 0.0) == 4  # no metrics yet: stale, half of the limit (8)
    a.in_flight = 7
    picker.on_metrics(a, ReplicaLoad(running=5, waiting=2, kv_usage=0.2), 0.0)
    assert a.limit == 5 and picker.replica_slots(a, 0.1) == 5  # in slow start a queue is the overshoot
    a.limit, a.in_flight, a.last_waiting, a.batch_seen = 8, 7, 0, 0.0  # past slow start, its batch unknown
    picker.on_metrics(a, ReplicaLoad(running=5, waiting=0, kv_usage=0.2), 0.04)
    picker.on_metrics(a, ReplicaLoad(running=5, waiting=2, kv_usage=0.2), 0.05)
    assert a.limit == 8  # past slow start, a small queue seen once may be requests sent mid-step
    picker.on_metrics(a, ReplicaLoad(running=5, waiting=2, kv_usage=0.2), 0.05)
    assert a.limit == 5  # seen twice: the engine runs 5 of our 7
    a.in_flight = 2
    picker.on_metrics(a, ReplicaLoad(running=3, waiting=0, kv_usage=0.95), 0.2)
    assert picker.replica_slots(a, 0.3) == 2  # saturated KV: keeps only what it has
    picker.on_metrics(a, ReplicaLoad(running=8, waiting=30, kv_usage=0.95), 0.2)  # large: counts at once
    assert picker.replica_slots(a, 0.3) == 1  # others overfill it: one slot, never zero
    assert picker.replica_slots(a, 10.0) == 1  # stale: half, at least one


def test_limit_never_exceeds_the_configured_cap() -> None:
    picker, (a, _) = fleet(cap=6)
    for t in range(10):
        a.peak_in_flight = int(a.limit)
        picker.on_metrics(a, ReplicaLoad(running=a.limit, waiting=0, kv_usage=0.1), float(t))
    assert a.limit == 6


def test_a_good_scrape_does_not_clear_request_failures() -> None:
    picker, (a, _) = fleet()
    picker.on_failure(a, 0.0, hard=False, reason="deadline")
    picker.on_scrape(a, ReplicaLoad(running=0, waiting=0, kv_usage=0.0), 0.5)
    picker.on_failure(a, 1.0, hard=False, reason="deadline")
    assert a.health is Health.EJECTED and "deadline" in a.eject_reason


def test_scale_out_desired_only_after_a_saturated_spell() -> None:
    picker, (a, b) = fleet()
    hot = ReplicaLoad(running=8, waiting=10, kv_usage=0.95)
    picker.on_metrics(a, hot, 0.0)
    picker.on_metrics(b, ReplicaLoad(running=0, waiting=0, kv_usage=0.1), 0.0)
    assert not picker.scale_out_desired("p", 0.5)
    picker.on_metrics(b, hot, 1.0)
    assert not picker.scale_out_desired("p", 1.0)
    for t in range(2, 11):
        picker.on_metrics(a, hot, float(t))
        picker.on_metrics(b, hot, float(t))
        assert not picker.scale_out_desired("p", float(t))
    picker.on_metrics(a, hot, 11.0)
    picker.on_metrics(b, hot, 11.0)
    assert picker.scale_out_desired("p", 11.0)
    picker.on_metrics(b, ReplicaLoad(running=1, waiting=0, kv_usage=0.2), 11.5)
    assert not picker.scale_out_desired("p", 11.5)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.integers(0, 20), st.integers(0, 20)), min_size=2, max_size=6))
def test_never_picks_saturated_when_a_lighter_replica_has_room(loads: list[tuple[float, int, int]]) -> None:
    picker = Picker(CFG)
    reps = [picker.add(Replica(id=f"r{i}", pool="p", cap=16)) for i in range(len(loads))]
    for r, (kv, running, waiting) in zip(reps, loads, strict=True):
        picker.on_metrics(r, ReplicaLoad(running=running, waiting=waiting, kv_usage=kv), 0.0)
    chosen = picker.pick("p", 0.1)
    assert chosen is not None
    bands = [picker.band(r, 0.1) for r in reps]
    if any(b is not Band.SATURATED for b in bands):
        assert picker.band(chosen, 0.1) is not Band.SATURATED


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["dispatch", "answer", "fail", "hard", "release", "scrape", "probe"]),
                          st.integers(0, 11), st.integers(0, 24), st.integers(0, 6), st.floats(0, 1)),
                max_size=150))
def test_a_large_pool_keeps_exact_running_sums(ops: list[tuple[str, int, int, int, float]]) -> None:
    """Past SCAN_MAX replicas the picker keeps running sums and a room list instead of
    rescanning; they must always equal a full recount."""
    picker = Picker(CFG)
    reps = [picker.add(Replica(id=f"r{i}", pool="p")) for i in range(12)]
    now = 0.0
    for op, i, running, waiting, kv in ops:
        now += 0.25
        r = reps[i]
        if op == "dispatch" and r.in_flight < int(r.limit):
            picker.on_dispatch(r)
        elif op == "answer" and r.in_flight:
            picker.on_response(r, 200, 0.5, now)
        elif op in ("fail", "hard") and r.in_flight:
            picker.on_failure(r, now, hard=op == "hard")
        elif op == "release" and r.in_flight:
            picker.on_release(r)
        elif op == "scrape" and r.health is Health.HEALTHY:
            picker.on_scrape(r, ReplicaLoad(running=running, waiting=waiting, kv_usage=kv), now)
        elif op == "probe":
            picker.on_probe(r, True, now)
        assert picker.slots("p", now) == sum(picker.replica_slots(x, now) for x in reps)
        assert picker.proven_slots("p", now) == sum(
            picker.replica_slots(x, now) if math.isinf(x.ssthresh) or x.proven < 1
            else min(picker.replica_slots(x, now), int(x.proven)) for x in reps)
        room = {x.id for x in reps if x.health is Health.HEALTHY and x.in_flight < int(x.limit)}
        chosen = picker.pick("p", now)
        assert (chosen is None) == (not room)
        assert chosen is None or chosen.id in room


def test_probes_of_an_engine_edge_become_rare() -> None:
    """An engine that runs 16 at once, always full: each failed probe doubles the wait before the
    next, so over 400 scrapes the limit sits above 16 (a request in the engine's own FIFO) only
    now and then, where a fixed probe every 5 scrapes held it there about a fifth of the time."""
    from turbogate.sched.concurrency import adapt_limit
    from turbogate.sched.load import ReplicaLoad
    from turbogate.sched.replica import PickerConfig, Replica

    cfg = PickerConfig()
    r = Replica(id="r", pool="p")
    above = 0
    for _ in range(400):
        r.in_flight = int(r.limit)  # the gateway keeps it full
        running, waiting = min(r.in_flight, 16), max(0, r.in_flight - 16)
        adapt_limit(r, ReplicaLoad(running=float(running), waiting=float(waiting),
                                   kv_usage=0.9 if waiting else 0.5), cfg)  # its KV cache the edge: no batch
        above += r.limit > 16
    assert r.limit <= 17 and r.probe_backoff > 1
    assert above <= 20, above


def test_a_cut_never_sets_the_limit_above_what_the_engine_runs() -> None:
    """vLLM's waiting gauge lags: a request that arrived during a step counts only after the next
    schedule.  After a burst of sends the gauge shows 2 of the 7 waiting; the limit must still
    fall to the 16 the engine runs, not to in-flight − 2 = 21 (a 5-slot overshoot that kept lower
    tiers' requests in the engine's own FIFO for minutes in the simulated 2× overload)."""
    from turbogate.sched.concurrency import adapt_limit
    from turbogate.sched.replica import PickerConfig

    r = Replica(id="r", pool="p")
    r.limit, r.in_flight = 27.0, 23
    adapt_limit(r, ReplicaLoad(running=16.0, waiting=2.0, kv_usage=0.3), PickerConfig())  # slow start: counts at once
    assert r.limit == 16 and r.ssthresh == 16


def test_slow_start_grows_at_most_half_again_what_the_engine_ran() -> None:
    from turbogate.sched.concurrency import adapt_limit
    from turbogate.sched.replica import PickerConfig

    r = Replica(id="r", pool="p")
    r.limit, r.in_flight = 18.0, 18
    adapt_limit(r, ReplicaLoad(running=15.0, waiting=0.0, kv_usage=0.3), PickerConfig())
    assert r.limit == pytest.approx(22.5)  # not 27: the engine showed 15


def test_slow_start_grows_on_what_a_holdback_line_let_the_engine_run() -> None:
    """Slow start grows once its engine ran ``LOWER_TIERS_BAR`` (0.8) of the limit.  A lower
    tier's holdback line below that bar (Relax's 0.7) keeps the engine under it, so the limit,
    a guess while it is learnt, would hold that tier back for good; a line that kept a queued
    request waiting since the replica's last scrape is the bar instead."""
    picker, (a, b) = fleet(cap=None)
    for r in (a, b):
        assert r.limit == 8.0 and math.isinf(r.ssthresh)
        r.in_flight = 6
    picker.on_metrics(a, ReplicaLoad(running=6, waiting=0, kv_usage=0.2), 1.0)
    assert a.limit == 8.0  # 6 of 8 run: under 0.8 of the limit, nothing proves it full
    picker.note_held("p", 11 / 16, 1.2)  # Relax waited at its line, 11 of the pool's 16 slots
    picker.on_metrics(a, ReplicaLoad(running=6, waiting=0, kv_usage=0.2), 2.0)
    assert a.limit == 9.0  # its share of the line (5 of 8) ran: ×1.5, at most half again the 6 run
    picker.on_metrics(a, ReplicaLoad(running=6, waiting=0, kv_usage=0.2), 3.0)
    assert a.limit == 9.0  # nothing held since its last scrape: the bar is 0.8 again


def test_slow_start_never_lowers_a_limit() -> None:
    from turbogate.sched.concurrency import adapt_limit
    from turbogate.sched.replica import PickerConfig

    r = Replica(id="r", pool="p")
    r.limit, r.in_flight = 12.0, 7
    # held at half the pool's slots: the bar is 6 of 12, the engine ran 7, half again of which is 10.5
    adapt_limit(r, ReplicaLoad(running=7.0, waiting=0.0, kv_usage=0.3), PickerConfig(), held=0.5)
    assert r.limit == 12.0


def test_a_queue_without_full_kv_leaves_the_slots_to_the_limit() -> None:
    """Slots shrink to the in-flight count only while the KV cache is full.  On a queue, the limit
    is cut instead: shrinking to in-flight on a scrape's queue shrinks again with every completion
    until the next scrape, down to one slot."""
    picker, (a, _) = fleet(cap=16)
    a.limit, a.in_flight = 16.0, 20
    picker.on_metrics(a, ReplicaLoad(running=16, waiting=10, kv_usage=0.3), 0.0)
    assert picker.band(a, 0.0) is Band.SATURATED and a.limit == 10  # cut: 20 in flight, 10 waiting
    a.in_flight = 4  # completions since the scrape
    assert picker.replica_slots(a, 0.1) == 10


_REPLICA_STATE = st.tuples(
    st.integers(1, 40),  # limit
    st.one_of(st.just(math.inf), st.floats(1, 40)),  # ssthresh: in slow start, or past it
    st.integers(0, 40),  # proven: what the engine was seen running
    st.integers(0, 40),  # in flight
    st.sampled_from(["fresh", "stale", "none"]),  # its metrics
    st.floats(0, 1),  # KV use (saturated past 0.85)
    st.booleans(),  # ejected
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_REPLICA_STATE, min_size=1, max_size=8))
def test_slot_counts_is_slots_and_proven_slots_in_one_pass(states: list[tuple[int, float, int, int, str, float,
                                                                              bool]]) -> None:
    """The flow reads both totals of a scanned pool through ``slot_counts``, one pass over its
    replicas: they must equal the two totals by their definitions (an indexed pool's come from
    the running sums, checked against a recount above)."""
    picker = Picker(CFG)
    now = 100.0
    reps = []
    for i, (limit, ssthresh, proven, in_flight, metrics, kv, ejected) in enumerate(states):
        r = picker.add(Replica(id=f"r{i}", pool="p"))
        r.limit, r.ssthresh, r.proven, r.in_flight = float(limit), ssthresh, float(proven), in_flight
        if metrics != "none":
            r.load = ReplicaLoad(running=float(proven), waiting=0.0, kv_usage=kv)
            r.load_at = now - (0.5 if metrics == "fresh" else 10.0)
        if ejected:
            r.health = Health.EJECTED
        reps.append(r)
    slots = [picker.replica_slots(r, now) for r in reps]
    proven_total = sum(n if math.isinf(r.ssthresh) or r.proven < 1 else min(n, int(r.proven))
                       for r, n in zip(reps, slots, strict=True))
    assert picker.slot_counts("p", now) == (sum(slots), proven_total)
    assert picker.slot_counts("p", now) == (picker.slots("p", now), picker.proven_slots("p", now))


def test_no_health_changes_hand_over_nothing_and_keep_none_back() -> None:
    picker, (r, _) = fleet()
    assert not picker.take_health_changes()
    picker.on_failure(r, 1.0, hard=True)
    changes = picker.take_health_changes()
    assert [(c.replica.id, c.healthy) for c in changes] == [("r0", False)]
    assert not picker.take_health_changes()  # taken once


def test_an_engine_that_always_reports_itself_idle_is_doubted_once() -> None:
    """An engine whose metrics say 0 running while the gateway keeps all its slots busy gives the
    adaptive limit nothing to grow on (a neutral stub's constant gauges, another engine's metric
    names): after SILENT_ENGINE_SCRAPES such scrapes the picker says so, once per streak."""
    from turbogate.sched.replica import SILENT_ENGINE_SCRAPES

    picker = Picker(CFG)
    r = picker.add(Replica(id="r", pool="p", cap=1024))
    idle = ReplicaLoad(running=0, waiting=0, kv_usage=0.0)
    doubts = []
    for i in range(2 * SILENT_ENGINE_SCRAPES):
        r.in_flight = r.peak_in_flight = int(r.limit)  # every slot busy since the last scrape
        picker.on_metrics(r, idle, float(i))
        doubts += picker.take_metrics_doubts()
    assert [d.replica for d in doubts] == [r] and "engine: openai" in doubts[0].reason
    assert r.limit == 8  # what the doubt is about: the limit never grew
    picker.on_metrics(r, ReplicaLoad(running=8, waiting=0, kv_usage=0.2), 20.0)  # it runs ours after all
    assert r.silent_full_scrapes == 0 and not picker.take_metrics_doubts()


def test_an_idle_gateway_does_not_doubt_an_idle_engine() -> None:
    from turbogate.sched.replica import SILENT_ENGINE_SCRAPES

    picker = Picker(CFG)
    r = picker.add(Replica(id="r", pool="p", cap=1024))
    for i in range(3 * SILENT_ENGINE_SCRAPES):
        r.in_flight = r.peak_in_flight = 2  # a few of ours in flight, the limit not reached
        picker.on_metrics(r, ReplicaLoad(running=0, waiting=0, kv_usage=0.0), float(i))
    assert not picker.take_metrics_doubts()


def test_a_pool_is_learning_while_a_scraped_replica_is_in_slow_start() -> None:
    picker, (a, b) = fleet(cap=32)
    unscraped = picker.add(Replica(id="u", pool="p", scraped=False))
    known = picker.add(Replica(id="k", pool="q", engine_seqs=16))
    assert picker.learning("p") and math.isinf(unscraped.ssthresh)
    assert not picker.learning("q") and known.ssthresh == 16  # its batch is configured: nothing to learn
    for r in (a, b):
        r.in_flight = 12
        picker.on_metrics(r, ReplicaLoad(running=8, waiting=4, kv_usage=0.3), 0.0)  # a queue: the edge
    assert not picker.learning("p")  # the replica without metrics has no limit to learn


def test_a_nearly_full_kv_cache_keeps_room_for_what_its_free_blocks_hold() -> None:
    """Past ``saturated_kv`` a replica offers what it held at the scrape and the requests its free
    cache holds up to ``KV_FILL`` (56 running at 0.865: 0.085 × 56 / 0.865 = 5 more), not only what
    it holds: that froze Turbo out until the next scrape while a cohort of long requests decoded."""
    picker, (a, _) = fleet(cap=64)
    a.limit, a.in_flight = 64.0, 56
    picker.on_metrics(a, ReplicaLoad(running=56, waiting=0, kv_usage=0.865), 0.0)
    assert picker.band(a, 0.0) is Band.SATURATED
    assert picker.replica_slots(a, 0.1) == 61
    a.in_flight = 61  # sent since the scrape: the room is taken, not offered again
    assert picker.replica_slots(a, 0.2) == 61
    picker.on_metrics(a, ReplicaLoad(running=61, waiting=0, kv_usage=0.96), 0.5)
    assert picker.replica_slots(a, 0.6) == 61  # past KV_FILL: what it holds, no more


def test_turbo_goes_where_the_fewest_prefills_are_under_way() -> None:
    """Under an overload every replica prefills something: Turbo still goes to the one with the
    fewest of ours awaiting a first token, not by score to the emptiest, where a burst of Turbo
    prefills would meet in one engine step."""
    picker = Picker(CFG)
    a, b = (picker.add(Replica(id=f"r{i}", pool="p", engine_seqs=16)) for i in range(2))
    for r in (a, b):
        picker.on_metrics(r, ReplicaLoad(running=4, waiting=0, kv_usage=0.3), 0.0)
    a.in_flight, a.awaiting_first = 4, 2  # the emptier, with two prefills under way
    b.in_flight, b.awaiting_first = 10, 1
    assert picker.pick("p", 0.1) is a  # lower tiers: by score
    assert picker.pick("p", 0.1, proven_only=True) is b
    b.awaiting_first = 2
    a.last_sent = b.last_sent = 0.05
    assert picker.pick("p", 0.1, proven_only=True) is a  # as many, sent together: by score again


def test_among_as_many_prefills_turbo_goes_where_they_were_sent_first() -> None:
    """Two replicas each with one prefill under way: Turbo goes where it was sent earlier (nearest
    done), not where one was just sent and would share Turbo's engine step, whatever the score."""
    picker = Picker(CFG)
    a, b = (picker.add(Replica(id=f"r{i}", pool="p", engine_seqs=16)) for i in range(2))
    for r in (a, b):
        picker.on_metrics(r, ReplicaLoad(running=4, waiting=0, kv_usage=0.3), 0.0)
    a.in_flight, b.in_flight = 4, 10  # a is the emptier: the score's choice
    for r, sent in ((a, 0.099), (b, 0.03)):
        r.awaiting_first, r.last_sent = 1, sent
    assert picker.pick("p", 0.1, proven_only=True) is b
    a.last_sent = 0.02
    assert picker.pick("p", 0.1, proven_only=True) is a


def test_a_large_pool_s_full_scan_keeps_the_prefill_gate() -> None:
    """Past SCAN_MAX replicas a lower tier's pick samples a few and scans the rest only when none
    of those would do: the scan must hold the prefill gate too, or a large pool lets a lower-tier
    prefill through every shut replica under an overload."""
    picker, replicas = fleet(12)
    for r in replicas:
        r.prefill_gate, r.lower_prefills = 1, 1
    assert picker.pick("p", 0.0) is None
    replicas[7].lower_prefills = 0
    assert picker.pick("p", 0.0) is replicas[7]
    replicas[7].turbo_prefills = 1  # Turbo's prefill under way there shuts it as well
    assert picker.pick("p", 0.0) is None
    assert picker.pick("p", 0.0, proven_only=True) is not None  # Turbo is never gated
