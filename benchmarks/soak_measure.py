"""What ``overload_soak.py``'s burst question measures (issue 43), pure: the tier mixes, the
seeded schedule a run sends, and the recovery figures over 4-s windows of send times.

Shared by the real run (``overload_soak.py``) and its virtual-time twins (``soak_virtual.py``),
so a real run, its replay and its control run without the burst are judged by one rule."""

from __future__ import annotations

import math
import random
from functools import partial
from typing import Any

from turbogate.results.percentile import percentile

KEY = "sk-soak"  # the soak tenant's API key, in the real run's config and the simulated one's
#: Turbo is 5 % of the offered load: half the fleet's capacity at 10×, so Turbo alone fits and
#: its TTFT is a fair question; Standard and Relax bring the excess.
MIX = (("turbo", 0.05), ("standard", 0.75), ("relax", 0.2))
#: The mixed load before and after the burst: enough Turbo to measure a p95 in each window.
BASE_MIX = (("turbo", 0.3), ("standard", 0.5), ("relax", 0.2))
WINDOW_S, STEP_S = 4.0, 0.5  # recovery windows of send times, and how far apart they start
#: A slow window of a burst run is the load's own when the run without the burst has one starting
#: this close to it (two window steps: the same arrivals, a real machine's timing around them).
SAME_MOMENT_S = 1.0

p95 = partial(percentile, q=95)

Sent = list[tuple[float, str, float]]  # (send time, tier, TTFT; inf: shed or no first token)
Loop = tuple[float, float, tuple[tuple[str, float], ...], bool]  # next send time, rate, mix, the burst's


def real_schedule(seed: int, base_rps: float, burst_rps: float, base_s: float, burst_s: float,
                  after_s: float) -> tuple[list[tuple[float, str, bool]], float, float]:
    """The requests the burst question sends with ``seed``, as (send time, tier, part of the burst),
    and when the burst starts and ends: Poisson arrivals from ``random.Random(seed + 1)``, drawn
    as two event loops would (each wake draws its tier, then the next gap; beside the burst, the
    mixed load's loop draws its first gap before the burst's; each phase starts when the one before
    sent its last request)."""
    rng = random.Random(seed + 1)

    def phase(rps: float, seconds: float, at: float) -> list[tuple[float, str, bool]]:
        names, weights = [n for n, _ in BASE_MIX], [w for _, w in BASE_MIX]
        out, t = [], 0.0
        while t < seconds:  # the last gap may pass the end, and that request is sent
            t += rng.expovariate(rps)
            out.append((at + t, rng.choices(names, weights)[0], False))
        return out

    sent = phase(base_rps, base_s, 0.0)
    started = sent[-1][0]
    loops: list[Loop] = [(started + rng.expovariate(base_rps), base_rps, BASE_MIX, False),
                         (started + rng.expovariate(burst_rps), burst_rps, MIX, True)]
    while loops:
        i = min(range(len(loops)), key=lambda k: loops[k][0])
        at, rps, mix, bursting = loops[i]
        sent.append((at, rng.choices([n for n, _ in mix], [w for _, w in mix])[0], bursting))
        if at >= started + burst_s:
            del loops[i]
        else:
            loops[i] = (at + rng.expovariate(rps), rps, mix, bursting)
    ended = sent[-1][0]
    return sent + phase(base_rps, after_s, ended), started, ended


def window_verdicts(sent: list[tuple[float, str, float]], tier: str, start: float, until: float,
                    limit: float) -> list[tuple[float, bool]]:
    """``tier``'s 4-s windows of send times from ``start``, ``STEP_S`` apart, that end by ``until``:
    (window start, its p95 TTFT within ``limit``; a window with no request is within)."""
    mine = [(at, ttft) for at, t, ttft in sent if t == tier and start <= at < until]
    starts = [start + k * STEP_S for k in range(int((until - start - WINDOW_S) / STEP_S) + 1)]
    verdicts = []
    for s in starts:
        window = [ttft for at, ttft in mine if s <= at < s + WINDOW_S]
        verdicts.append((s, not window or (p95(window) or math.inf) <= limit))
    return verdicts


def slow_share(verdicts: list[tuple[float, bool]]) -> float | None:
    """The share of ``verdicts``' windows over their limit (None: no window)."""
    return round(sum(1 for _, ok in verdicts if not ok) / len(verdicts), 3) if verdicts else None


def recovery_s(sent: list[tuple[float, str, float]], tier: str, burst_end: float, until: float,
               limit: float) -> tuple[float | None, float | None, list[list[float]], float | None]:
    """Seconds from ``burst_end`` until every window of ``tier``'s send times from then on has a
    p95 TTFT within ``limit``, and until the first such window (None: not within ``until``); the
    slow stretches after that first one ([from, to] window starts, seconds after the burst): one
    that every tier shares at the same time is the machine's, not a tier's; and the share of the
    windows after the first one back that are slow (``slow_share``), to set beside the share a
    steady load without a burst has (``burst_figures``)."""
    return recovery_of(window_verdicts(sent, tier, burst_end, until, limit), burst_end)


def recovery_of(verdicts: list[tuple[float, bool]],
                burst_end: float) -> tuple[float | None, float | None, list[list[float]], float | None]:
    """``recovery_s`` over windows already judged (``window_verdicts`` from ``burst_end``)."""
    good = [ok for _, ok in verdicts]
    first_i = next((i for i, ok in enumerate(good) if ok), None)
    first = None if first_i is None else round(verdicts[first_i][0] - burst_end, 2)
    slow: list[list[float]] = []
    if first_i is not None:
        for i in range(first_i + 1, len(verdicts)):
            if good[i]:
                continue
            at = round(verdicts[i][0] - burst_end, 2)
            if slow and not good[i - 1]:
                slow[-1][1] = at
            else:
                slow.append([at, at])
    later = None if first_i is None else slow_share(verdicts[first_i + 1:])
    for i in range(len(verdicts)):
        if all(good[i:]):
            return round(verdicts[i][0] - burst_end, 2), first, slow, later
    return None, first, slow, later


def beyond_steady_s(verdicts: list[tuple[float, bool]], steady: list[tuple[float, bool]],
                    burst_end: float) -> float | None:
    """Seconds from ``burst_end`` until every later window of ``verdicts`` is within its limit or
    is the load's own: the same load without the burst (``steady``, windows at the same starts)
    has a slow window starting within ``SAME_MOMENT_S`` of it.  None: not within the windows."""
    steady_slow = [at for at, ok in steady if not ok]
    fine = [ok or any(abs(at - s) <= SAME_MOMENT_S + 1e-9 for s in steady_slow) for at, ok in verdicts]
    for i in range(len(verdicts)):
        if all(fine[i:]):
            return round(verdicts[i][0] - burst_end, 2)
    return None


#: What the burst's JSON calls recovered (``burst_figures``), stated in it.
RECOVERY_DEFINITION = (
    "windows: p95 TTFT of a tier's requests sent in each 4-s window, windows 0.5 s apart, against 2x the "
    "tier's p95 before the burst (a shed or unanswered request is too slow). recovery_s: from the burst's "
    "end until every later window is within (strict). first_window_back_s: until the first window within. "
    "slow_share_after_back: the share of windows after that first one that are not within; "
    "slow_share_steady: the same share with no burst at all (simulated: the same arrivals without the "
    "burst, over the same span; real: the windows before the burst, slow_share_before_burst). "
    "back_within_10s_at_steady_rate: the first window back within 10 s and later windows slow no more often "
    "than the steady share. slow_without_burst_s (with a run without the burst): that run's slow stretches, "
    "as slow_after_back_s, to set beside them. recovery_beyond_steady_s (with a run without the burst): from "
    "the burst's end until every later window is within or the run without the burst has a slow window "
    "starting within 1 s of it (the same arrivals' own clump, not the burst's backlog).")


def burst_figures(sent: list[tuple[float, str, float]], started: float, ended: float, until: float,
                  steady: list[tuple[float, str, float]] | None = None) -> dict[str, Any]:
    """Per tier: p95 TTFT before the burst, the recovery, the first window back and the slow
    stretches after it (``recovery_s``), and pass/fail against the 10-s target; and how often a
    window is slow with no burst at all (``RECOVERY_DEFINITION``): over ``steady``'s requests from
    ``ended`` to ``until`` (the same load without the burst), else over the windows before it."""
    before = {t: p95([ttft for at, tier, ttft in sent if tier == t and at < started]) for t, _ in BASE_MIX}
    first_at = min((at for at, _, _ in sent), default=started)
    recovery: dict[str, float | None] = {}
    first_back: dict[str, float | None] = {}
    slow_after: dict[str, list[list[float]]] = {}
    share_after: dict[str, float | None] = {}
    share_before: dict[str, float | None] = {}
    share_steady: dict[str, float | None] = {}
    slow_steady: dict[str, list[list[float]]] = {}
    beyond: dict[str, float | None] = {}
    for t, _ in BASE_MIX:
        base = before[t]
        if base is None:
            recovery[t], first_back[t], slow_after[t], share_after[t] = None, None, [], None
            share_before[t] = share_steady[t] = beyond[t] = None
            continue
        after = window_verdicts(sent, t, ended, until, 2 * base)
        recovery[t], first_back[t], slow_after[t], share_after[t] = recovery_of(after, ended)
        share_before[t] = slow_share(window_verdicts(sent, t, first_at, started, 2 * base))
        if steady is None:
            share_steady[t] = share_before[t]
        else:  # when the run without the burst is slow: the schedule's own clumps
            calm = window_verdicts(steady, t, ended, until, 2 * base)
            share_steady[t] = slow_share(calm)
            slow_steady[t] = recovery_of(calm, ended)[2]
            beyond[t] = beyond_steady_s(after, calm, ended)
    at_steady = {t: _within(first_back[t], 10.0) and share_after[t] is not None and share_steady[t] is not None
                 and share_after[t] <= share_steady[t] for t in ("turbo", "standard")}  # type: ignore[operator]
    return {"p95_ttft_before_s": {t: None if v is None else round(v, 4) for t, v in before.items()},
            "recovery_s": recovery, "first_window_back_s": first_back, "slow_after_back_s": slow_after,
            "slow_share_after_back": share_after, "slow_share_steady": share_steady,
            **({"slow_without_burst_s": slow_steady, "recovery_beyond_steady_s": beyond} if steady is not None else {}),
            "slow_share_before_burst": share_before,
            "steady_from": "no_burst_run" if steady is not None else "before_burst",
            "window_s": WINDOW_S, "recovery_definition": RECOVERY_DEFINITION,
            "pass": {**{f"{t}_within_10s": _within(recovery[t], 10.0) for t in ("turbo", "standard")},
                     **{f"{t}_back_within_10s_at_steady_rate": at_steady[t] for t in ("turbo", "standard")},
                     **({f"{t}_within_10s_beyond_steady": _within(beyond[t], 10.0) for t in ("turbo", "standard")}
                        if steady is not None else {})}}


def _within(value: float | None, bound: float) -> bool:
    return value is not None and value <= bound

