"""The measured knee — the offered load (all tiers, req/s) where a tier stopped keeping up in a
run's steps — with its evidence (pure).

One of the project's four named knees (docs/bench.md, "Four knees"): this one is *measured* from a
bench or sim run; the *predicted* knee (``predicted_knee``) and the *plateau* knee
(``plateau_knee``), both in plan/knee.py, are the planner's closed forms, and the *online* knee
(sched/knee_online.py) is estimated live by the gateway.  The run summary, ``bench --find-knee``
(each probe's verdict) and ``plan --from-run`` read the measured knee from here.  Three methods,
each a per-step test over the steps sorted by offered load (docs/bench.md sets them side by side):

- ``throughput``: achieved / offered falls short of 1 by more than ``1 − ratio`` *and* by more than
  ``z`` × the step-to-step noise of that ratio measured at low load (scaled to the step's count);
- ``latency``: p95 of ``metric`` exceeds max(k, 1 + z × low-load spread) × its low-load value;
- ``goodput``: (requests meeting every ``--slo``) / offered falls short as for throughput (off
  without ``--slo``: goodput would just repeat throughput).

A step with fewer than ``min_requests`` completed requests cannot vote ("thin"), and one where more
than ``max_error_rate`` of its requests failed for another reason than shedding cannot either
("errors": a broken run is not a saturated one).  A knee is claimed only when ``sustain``
consecutive steps fail.  A ratio method's value is the *plateau*: the median, over the failing steps,
of the load at which the tier's completions would just match its share (for ``all``: what the target
completed while saturated, its capacity), never below the highest load that was kept up; where the
ratio first crossed its level is kept as ``crossing``.  The latency method's value is where p95
crosses its level, interpolated between the last step that passed and the first that failed.
Otherwise the verdict is "none" (no knee in range) or "inconclusive" with what to change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from turbogate.results.fmt import fmt_num
from turbogate.results.kneetypes import (
    METHOD_TEXT,
    NOISE_FLOOR,
    Knee,
    KneeSettings,
    MethodEvidence,
    StepState,
    StepVote,
    Verdict,
)
from turbogate.results.schema import KNEE_METHODS
from turbogate.results.stats import GroupStats, StepStats

__all__ = ["METHOD_TEXT", "Knee", "KneeSettings", "MethodEvidence", "StepVote", "curve", "detect_knee",
           "detect_knees", "method_cell", "method_evidence", "probe_state"]

def _crossing(x0: float, y0: float, x1: float, y1: float, level: float) -> float:
    """x where the segment (x0, y0)–(x1, y1) crosses ``level`` (y0 on one side, y1 on the other)."""
    if y1 == y0:
        return x1
    return x0 + (level - y0) * (x1 - x0) / (y1 - y0)


def _x(s: StepStats) -> float:
    """The knee's x: the load *offered* as realized (see :attr:`StepStats.offered_rps`)."""
    return s.offered_rps


def curve(steps: Sequence[StepStats], tier: str) -> list[tuple[float, GroupStats]]:
    """(realized offered load of the step, the tier's stats) sorted by that load, steps that sent something
    only (an interrupted run leaves later steps unsent)."""
    pts = [(_x(s), s.tiers[tier]) for s in steps if tier in s.tiers and s.tiers[tier].sent > 0]
    return sorted(pts, key=lambda p: p[0])


def _durations(steps: Sequence[StepStats], tier: str) -> list[float]:
    pts = sorted((_x(s), s.step.duration_s) for s in steps if tier in s.tiers and s.tiers[tier].sent > 0)
    return [d for _, d in pts]


def _broken(g: GroupStats, s: KneeSettings) -> bool:
    """More than ``max_error_rate`` of the step's answered requests failed for another reason than shedding."""
    answered = g.sent - g.unfinished
    return answered > 0 and (g.errors - g.shed) / answered > s.max_error_rate


def _low(indices: Sequence[int]) -> list[int]:
    """The low-load steps noise is measured on: the lowest third of the voting steps, at least two."""
    return list(indices[:max(2, len(indices) // 3)])


def _ratio_votes(pts: Sequence[tuple[float, GroupStats]], durations: Sequence[float], s: KneeSettings,
                 numerator: str) -> tuple[list[StepVote], float, list[float]]:
    """Votes of a ratio method (achieved or goodput over offered); returns votes, noise σ, raw ratios."""
    rows: list[tuple[float, float, int, int, bool]] = []  # x, ratio, completed, offered count, broken
    for (x, g), dur in zip(pts, durations, strict=True):
        num = g.achieved_rps if numerator == "achieved" else g.goodput_rps
        offered_n = max(1, round(g.offered_rps * dur))
        r = num / g.offered_rps if g.offered_rps > 0 else 1.0
        rows.append((x, r, round(num * dur), offered_n, _broken(g, s)))
    voting = [i for i, (_, _, n, _, broken) in enumerate(rows) if n >= s.min_requests and not broken]
    # Noise: shortfall × √count over the low-load steps that kept up (a saturated one is not noise).
    zs = [(1 - rows[i][1]) * math.sqrt(rows[i][3]) for i in _low(voting) if rows[i][1] >= s.ratio]
    sigma = max(NOISE_FLOOR, math.sqrt(sum(z * z for z in zs) / len(zs))) if zs else NOISE_FLOOR
    votes: list[StepVote] = []
    ratios: list[float] = []
    for x, r, n, m, broken in rows:
        level = min(s.ratio, 1 - s.z * sigma / math.sqrt(m))
        state: StepState = "errors" if broken else "thin" if n < s.min_requests and r >= level else \
            "fail" if r < level else "ok"
        # A step too thin to count its completions still fails when it completed almost nothing.
        if state == "thin" and r < level:
            state = "fail"
        votes.append(StepVote(x, r, level, n, state))
        ratios.append(r)
    return votes, sigma, ratios


def _latency_votes(pts: Sequence[tuple[float, GroupStats]], s: KneeSettings
                   ) -> tuple[list[StepVote], float | None, float | None, float | None]:
    """Votes of the latency method; returns votes, noise (relative spread), baseline p95, level."""
    rows: list[tuple[float, float | None, int, bool]] = []
    late: list[bool] = []  # p95 unknown because too many requests were still running: beyond any level
    for x, g in pts:
        d = g.latency.get(s.metric)
        p95 = None if d is None else d.p95
        rows.append((x, p95, 0 if d is None else d.n, _broken(g, s)))
        late.append(p95 is None and g.unfinished > 0)
    voting = [i for i, (_, v, n, broken) in enumerate(rows) if v is not None and n >= s.min_requests and not broken]
    if not voting:
        return [StepVote(x, v, None, n, "errors" if b else "thin") for x, v, n, b in rows], None, None, None
    low = [rows[i][1] for i in _low(voting)]
    vals = [v for v in low if v is not None and v > 0]
    base = rows[voting[0]][1]
    spread = (max(vals) / min(vals) - 1) if len(vals) >= 2 else 0.0
    if base is None or base <= 0:
        return [StepVote(x, v, None, n, "thin") for x, v, n, _ in rows], spread, base, None
    level = base * max(s.k, 1 + s.z * spread)
    votes = []
    for (x, v, n, broken), unknown in zip(rows, late, strict=True):
        state: StepState = "errors" if broken else "fail" if unknown else \
            "thin" if v is None or n < s.min_requests else "fail" if v > level else "ok"
        votes.append(StepVote(x, v, level, n, state))
    return votes, spread, base, level


def _decide(method: str, votes: Sequence[StepVote], s: KneeSettings, level: float | None,
            cross: Any) -> tuple[Verdict, float | None, str | None, str]:
    """Verdict, knee, confidence and reason from a method's votes (sorted by offered load)."""
    states = [v.state for v in votes]
    top = votes[-1].offered_rps if votes else 0.0
    if len(votes) < 2:
        return "inconclusive", None, None, ("a knee needs at least two load steps (use a ramp, --shape steps or "
                                            "--find-knee)")
    if sum(st == "errors" for st in states) > len(states) // 2:
        return "inconclusive", None, None, ("most steps failed with errors other than shedding: fix the requests "
                                            "first (see the error reasons)")
    run_start = None
    for i in range(len(states) - s.sustain + 1):
        if all(st == "fail" for st in states[i:i + s.sustain]):
            run_start = i
            break
    voting = [st for st in states if st in ("ok", "fail")]
    if run_start is not None:
        later = [st for st in states[run_start:] if st in ("ok", "fail")]
        value = cross(run_start)
        recovered = "ok" in later
        long_run = sum(1 for st in later if st == "fail") >= s.sustain + 1
        confidence = "low" if recovered else "high" if long_run else "medium"
        why = f"{sum(1 for st in later if st == 'fail')} steps from {fmt_num(votes[run_start].offered_rps)} req/s fail"
        if recovered:
            why += " (a later step passed again: check the curve)"
        if "ok" not in states[:run_start]:
            return "inconclusive", None, None, (f"saturated already at the lowest load tested "
                                                f"({fmt_num(votes[0].offered_rps)} req/s): the knee is at or below "
                                                "it; lower --qps-start (or use --find-knee)")
        return "knee", value, confidence, why
    fails = [i for i, st in enumerate(states) if st == "fail"]
    if len(voting) < 2:
        return "inconclusive", None, None, (f"steps too short / too few requests: fewer than two steps completed "
                                            f"{s.min_requests} requests; lengthen --step-duration or --duration, "
                                            "use fewer --steps, or use --find-knee")
    if fails and fails[-1] == len(states) - 1:
        return "inconclusive", None, None, (f"only the highest step ({fmt_num(top)} req/s) fell short: raise --qps-end "
                                            "past it, or use --find-knee, to confirm a knee")
    if states[-1] == "thin":
        return "inconclusive", None, None, (f"the highest step ({fmt_num(top)} req/s) completed fewer than "
                                            f"{s.min_requests} requests; lengthen --step-duration or --duration")
    note = f"no knee up to {fmt_num(top)} req/s offered: the target kept up over the whole range"
    if fails:
        note += f" (isolated shortfall at {', '.join(fmt_num(votes[i].offered_rps) for i in fails)} treated as noise)"
    return "none", None, "medium" if fails else "high", note


def method_evidence(method: str, steps: Sequence[StepStats], tier: str, s: KneeSettings,
                    slo_set: bool = True) -> MethodEvidence:
    """One method's evidence and verdict for one tier."""
    pts = curve(steps, tier)
    if method == "goodput" and not slo_set:
        return MethodEvidence(method, "off", None, None, None, None, None,
                              "off: set --slo (without SLOs goodput repeats throughput)")
    if method in ("throughput", "goodput"):
        votes, sigma, ratios = _ratio_votes(pts, _durations(steps, tier), s,
                                            "achieved" if method == "throughput" else "goodput")

        def cross(j: int) -> float:
            # Between the last step that passed the (noise-aware) test and the first failing one: where the
            # ratio crosses its level, or halfway when the passing step was itself under it, within noise.
            i = j
            while i > 0 and votes[i - 1].state != "ok":
                i -= 1
            if i == 0:
                return votes[0].offered_rps
            x0, r0, x1, r1 = votes[i - 1].offered_rps, ratios[i - 1], votes[i].offered_rps, ratios[i]
            if r0 < s.ratio or r1 >= s.ratio:
                return (x0 + x1) / 2
            return _crossing(x0, r0, x1, r1, s.ratio)

        def plateau(j: int) -> float:
            # What the target completed while saturated: over the failing steps from j, the load at which the
            # tier's completions would just match its share (ratio × offered; for ``all``, achieved itself).
            # Never below the highest load that was kept up. The crossing alone reads a ramp's transient queue
            # growth just before capacity, or one short probe, as the knee.
            fails = [k for k in range(j, len(votes)) if votes[k].state == "fail"]
            kept = [v.offered_rps for v in votes[:j] if v.state == "ok"]
            est = float(np.median([ratios[k] * votes[k].offered_rps for k in fails]))
            return max(est, max(kept, default=0.0))

        verdict, value, conf, reason = _decide(method, votes, s, s.ratio, plateau)
        first = next((i for i in range(len(votes) - s.sustain + 1)
                      if all(v.state == "fail" for v in votes[i:i + s.sustain])), None)
        crossing = None if verdict != "knee" or first is None else cross(first)
        return MethodEvidence(method, verdict, value, conf, s.ratio, sigma, None, reason, tuple(votes),
                              crossing=crossing)
    lvotes, spread, base, level = _latency_votes(pts, s)

    def lcross(j: int) -> float:
        i = j
        while i > 0 and lvotes[i - 1].state != "ok":
            i -= 1
        if i == 0 or level is None:
            return lvotes[0].offered_rps
        y0, y1 = lvotes[i - 1].value, lvotes[i].value
        x0, x1 = lvotes[i - 1].offered_rps, lvotes[i].offered_rps
        if y0 is None or y1 is None or y1 <= level:
            return (x0 + x1) / 2
        return _crossing(x0, y0, x1, y1, level)

    verdict, value, conf, reason = _decide(method, lvotes, s, level, lcross)
    return MethodEvidence(method, verdict, value, conf, level, spread, base, reason, tuple(lvotes))


def detect_knee(steps: Sequence[StepStats], tier: str, settings: KneeSettings | None = None,
                slo_set: bool = True) -> Knee:
    """The knee of one tier over a run's steps, every method's evidence included."""
    s = settings or KneeSettings()
    ev = {m: method_evidence(m, steps, tier, s, slo_set) for m in KNEE_METHODS}
    main = ev[s.method] if ev[s.method].verdict != "off" else ev["throughput"]
    pts = curve(steps, tier)
    note = "no traffic for this tier" if not pts else main.reason
    if main.verdict != "knee" and main.method != s.method:
        note = f"{s.method} is off; {note}"

    def val(m: str) -> float | None:
        return ev[m].value if ev[m].verdict == "knee" else None

    claimed = main.verdict == "knee"
    return Knee(tier=tier, throughput=val("throughput"), latency=val("latency"), goodput=val("goodput"),
                used=main.method if claimed else None, value=main.value if claimed else None,
                baseline_p95_s=ev["latency"].baseline, note=note, verdict=main.verdict if pts else "inconclusive",
                confidence=main.confidence, evidence=ev)


def detect_knees(steps: Sequence[StepStats], settings: KneeSettings | None = None,
                 slo_set: bool = True) -> dict[str, Knee]:
    tiers = sorted({t for s in steps for t in s.tiers})
    return {t: detect_knee(steps, t, settings, slo_set) for t in tiers}


def probe_state(probes: Sequence[StepStats], newest: int, tier: str, settings: KneeSettings,
                slo_set: bool) -> StepState:
    """``--find-knee``: the state of the probe with step index ``newest`` under the configured method, judged
    among all probes so far exactly as the summary will judge it (same levels, same low-load noise)."""
    s = settings
    method = s.method if (s.method != "goodput" or slo_set) else "throughput"
    ordered = sorted((st for st in probes if tier in st.tiers and st.tiers[tier].sent > 0), key=_x)
    ev = method_evidence(method, ordered, tier, s, slo_set)
    for st, vote in zip(ordered, ev.steps, strict=True):
        if st.step.index == newest:
            return vote.state
    return "thin"


def method_cell(k: Knee, method: str) -> str:
    """One method's outcome for a table cell: its knee in req/s, or its verdict."""
    e = k.evidence.get(method)
    if e is None:  # a schema-1 summary: the value only
        v = k.by(method)
        return "–" if v is None else fmt_num(v)
    return fmt_num(e.value) if e.verdict == "knee" else e.verdict
