"""``sched/surge.py`` ``ArrivalPace.top_rate``: the top tier's rate the holdback reads at every
dispatch.  Its share of the last sixteen arrivals of all tiers dips now and then under a steady
rate; such a dip must not read as a fall (the lower tiers would take the slots it frees and hold
them a service time): the rates over the longest runs of arrivals the last ones bear out (all
tiers', and Turbo's own; back to a step and no further) are a floor under it.  A step up still
shows within sixteen arrivals (within ten where they come too close together for the rate before
them: the rate is then read since the step), a steady rate seldom reads as a step, and another
tier's batch does not hold the rate up once it has gone by.  Pure: arrival times passed in."""

from __future__ import annotations

import random
from collections import deque

from turbogate.sched.surge import (
    PACE_LONGEST,
    PACE_WINDOW,
    SURGE_HOLD,
    SURGE_RUN,
    ArrivalPace,
    Arrivals,
    longest_window,
    window_rate,
)


def _arrivals(rate: float, count: int, start: float, rng: random.Random, top_share: float) -> list[tuple[float, bool]]:
    t, out = start, []
    for _ in range(count):
        t += rng.expovariate(rate)
        out.append((t, rng.random() < top_share))
    return out


def _lowest_read(pace: ArrivalPace, arrivals: list[tuple[float, bool]], floor: bool) -> float:
    """The lowest top-tier rate read just before each arrival (a dispatch decision may be taken
    then); ``floor`` False: without the steady floor (the share of the last sixteen alone)."""
    lowest = float("inf")
    for t, top in arrivals:
        read = pace.top_rate(t, 0.0) if floor else pace.share * pace.recent_rate(t)
        lowest = min(lowest, read)
        pace.arrived(top, t)
    return lowest


def test_a_steady_rate_does_not_dip_with_the_last_sixteen_arrivals() -> None:
    rate, share = 120.0, 0.3
    for seed in range(1, 7):
        lows = []
        for floor in (False, True):
            rng = random.Random(seed)
            pace = ArrivalPace()
            warm = _arrivals(rate, 256, 0.0, rng, share)
            for t, top in warm:
                pace.arrived(top, t)
            lows.append(_lowest_read(pace, _arrivals(rate, 2000, warm[-1][0], rng, share), floor))
        without, with_floor = lows
        assert without < 0.55 * share * rate, (seed, without)  # the dips the lower tiers entered on
        assert with_floor > 0.65 * share * rate, (seed, with_floor)


def test_a_step_up_shows_within_sixteen_arrivals() -> None:
    rng = random.Random(3)
    pace = ArrivalPace()
    quiet = _arrivals(5.0, 300, 0.0, rng, 0.25)
    for t, top in quiet:
        pace.arrived(top, t)
    surge = _arrivals(50.0, PACE_WINDOW, quiet[-1][0], rng, 0.25)
    for t, top in surge:
        pace.arrived(top, t)
    assert pace.top_rate(surge[-1][0], 0.0) > 0.5 * 0.25 * 50.0  # ten times the rate: read at once


def test_a_tenfold_step_is_read_within_ten_arrivals_of_it() -> None:
    """Ten arrivals into a step from 1/s to 10/s, the sixteen-arrival window still reads under
    half the new rate (its first six are the quiet minute's); the rate since the step reads most
    of it in about two draws of three (400 draws: 66 %, a binomial standard deviation 2.4 points;
    the test at 1e-6 misses the rest until later arrivals)."""
    draws = 200
    since_step, window = [], []
    for seed in range(1, draws + 1):
        rng = random.Random(seed)
        arrivals = Arrivals()
        quiet = _arrivals(1.0, 300, 0.0, rng, 0.0)
        for t, _ in quiet + _arrivals(10.0, SURGE_RUN, quiet[-1][0], rng, 0.0):
            arrivals.add(t)
        since_step.append(arrivals.recent(t) or 0.0)
        window.append(window_rate(arrivals.times, t) or 0.0)
    assert sum(rate < 5.0 for rate in window) >= 0.85 * draws, sorted(window)[-30:]
    assert sum(rate >= 6.0 for rate in since_step) >= 0.55 * draws, sorted(since_step)


def test_a_steady_rate_seldom_reads_as_a_step() -> None:
    """A Poisson clump can pass for a step; at a steady rate that is rare, and the arrivals after
    it end the run since it (its rate falls back under twice the rate before) well before
    ``SURGE_HOLD`` arrivals."""
    for seed in range(1, 4):
        rng = random.Random(seed)
        arrivals = Arrivals()
        steps = held = 0
        for t, _ in _arrivals(10.0, 50_000, 0.0, rng, 0.0):
            anchored = arrivals.anchor >= 0.0
            arrivals.add(t)
            steps += not anchored and arrivals.anchor >= 0.0
            held += arrivals.anchor >= 0.0
        assert steps <= 2 and held <= steps * SURGE_HOLD // 2, (seed, steps, held)


def test_another_tier_s_batch_does_not_raise_the_floor() -> None:
    pace = ArrivalPace()
    t = 0.0
    for i in range(256):  # 8 a second, one in four Turbo
        t += 0.125
        pace.arrived(i % 4 == 0, t)
    before = pace.top_rate(t, 0.0)
    for _ in range(200):  # a client submits 200 lower-tier requests at once
        pace.arrived(False, t)
    t += 2.0  # the last sixteen arrivals are the batch's: the share of their rate reads nothing now
    assert pace.top_rate(t, 0.0) <= 1.1 * before


def test_the_steady_run_reaches_back_to_a_step_and_no_further() -> None:
    """Right after a step up the steady floor is the surge's own arrivals (a run reaching into the
    quiet minute before it would read slower than the last sixteen), and it grows with them."""
    rng = random.Random(5)
    quiet = _arrivals(0.5, 300, 0.0, rng, 0.3)
    surge = _arrivals(5.0, 700, quiet[-1][0], rng, 0.3)
    times: deque[float] = deque(maxlen=PACE_LONGEST)
    runs = {}
    for i, (t, _) in enumerate(quiet + surge):
        times.append(t)
        runs[i - len(quiet) + 1] = longest_window(times, t)  # keyed by surge arrivals so far
    assert runs[0] == 256  # a steady quiet minute: every arrival but the first 44 of 300
    assert runs[40] == 32 and runs[80] == 64  # the step bounds the run
    assert runs[700] == PACE_LONGEST


def test_a_dip_among_a_surge_s_first_arrivals_is_not_a_fall() -> None:
    """Forty arrivals into a tenfold step, the next sixteen come at 0.7 of its rate: the surge's
    own run since the step holds the floor (the lower tiers would take what a fall frees and hold
    it a service time), where a run of a fixed 64 reached back into the quiet minute."""
    pace = ArrivalPace()
    t = 0.0
    for i in range(300):
        t += 2.0
        pace.arrived(i % 4 == 0, t)
    for i in range(40):  # the surge: 5 a second, one in four Turbo
        t += 0.2
        pace.arrived(i % 4 == 0, t)
    for i in range(16):  # a lull
        t += 0.2 / 0.7
        pace.arrived(i % 4 == 0, t)
    assert pace.total_rate(t) > 0.75 * 5.0
