"""Knee detection: the offered load (all tiers, req/s) where a tier stops keeping up (pure).

Three methods, all reported; ``used`` says which one gives ``value``:

- ``throughput``: achieved throughput falls under ``ratio`` (95 %) of offered;
- ``latency``: p95 of ``metric`` passes ``k`` × its value at the lowest load;
- ``goodput``: goodput peaks (only when it falls again after the peak).

Crossings are interpolated linearly between the last step that passes and the first that fails,
so the knee is not limited to the sweep's step size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turbogate.results.schema import KNEE_METHODS
from turbogate.results.stats import GroupStats, StepStats


@dataclass(frozen=True, slots=True)
class KneeSettings:
    method: str = "throughput"
    ratio: float = 0.95
    k: float = 2.0
    metric: str = "e2e"  # latency metric for the latency method

    def __post_init__(self) -> None:
        if self.method not in KNEE_METHODS:
            raise ValueError(f"knee method must be one of {', '.join(KNEE_METHODS)}, got {self.method!r}")
        if not 0.0 < self.ratio <= 1.0:
            raise ValueError(f"knee ratio must be in (0, 1], got {self.ratio}")
        if self.k <= 1.0:
            raise ValueError(f"knee k must be > 1, got {self.k}")

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "ratio": self.ratio, "k": self.k, "metric": self.metric}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KneeSettings:
        return cls(method=str(d.get("method", "throughput")), ratio=float(d.get("ratio", 0.95)),
                   k=float(d.get("k", 2.0)), metric=str(d.get("metric", "e2e")))


@dataclass(frozen=True, slots=True)
class Knee:
    tier: str
    throughput: float | None
    latency: float | None
    goodput: float | None
    used: str | None  # the method that gives ``value`` (None: no knee in the tested range)
    value: float | None
    baseline_p95_s: float | None  # the low-load p95 the latency method compares against
    note: str

    def by(self, method: str) -> float | None:
        value: float | None = getattr(self, method)
        return value

    def to_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, "throughput": self.throughput, "latency": self.latency,
                "goodput": self.goodput, "used": self.used, "value": self.value,
                "baseline_p95_s": self.baseline_p95_s, "note": self.note}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Knee:
        def get(k: str) -> float | None:
            v = d.get(k)
            return None if v is None else float(v)

        used = d.get("used")
        return cls(tier=str(d["tier"]), throughput=get("throughput"), latency=get("latency"),
                   goodput=get("goodput"), used=None if used is None else str(used), value=get("value"),
                   baseline_p95_s=get("baseline_p95_s"), note=str(d.get("note", "")))


def _crossing(x0: float, y0: float, x1: float, y1: float, level: float) -> float:
    """x where the segment (x0, y0)–(x1, y1) crosses ``level`` (y0 on one side, y1 on the other)."""
    if y1 == y0:
        return x1
    return x0 + (level - y0) * (x1 - x0) / (y1 - y0)


def curve(steps: Sequence[StepStats], tier: str) -> list[tuple[float, GroupStats]]:
    """(offered load of the step, the tier's stats) sorted by offered load, steps that sent something only
    (an interrupted run leaves later steps unsent)."""
    pts = [(s.step.offered_rps, s.tiers[tier]) for s in steps if tier in s.tiers and s.tiers[tier].sent > 0]
    return sorted(pts, key=lambda p: p[0])


def _throughput_knee(pts: Sequence[tuple[float, GroupStats]], ratio: float) -> float | None:
    prev: tuple[float, float] | None = None
    for x, g in pts:
        if g.offered_rps <= 0:
            continue
        r = g.achieved_rps / g.offered_rps
        if r < ratio:
            return x if prev is None else _crossing(prev[0], prev[1], x, r, ratio)
        prev = (x, r)
    return None


def _latency_knee(pts: Sequence[tuple[float, GroupStats]], k: float, metric: str) -> tuple[float | None, float | None]:
    with_p95 = [(x, g.pct(metric)) for x, g in pts]
    vals = [(x, v) for x, v in with_p95 if v is not None]
    if not vals:
        return None, None
    base = vals[0][1]
    if base <= 0:
        return None, base
    level = k * base
    prev = vals[0]
    for x, v in vals[1:]:
        if v > level:
            return _crossing(prev[0], prev[1], x, v, level), base
        prev = (x, v)
    return None, base


def _goodput_knee(pts: Sequence[tuple[float, GroupStats]]) -> float | None:
    if len(pts) < 2:
        return None
    best = max(range(len(pts)), key=lambda i: pts[i][1].goodput_rps)
    if best == len(pts) - 1 or pts[best][1].goodput_rps <= 0:
        return None  # still rising at the highest load tested: no peak seen
    return pts[best][0]


def detect_knee(steps: Sequence[StepStats], tier: str, settings: KneeSettings | None = None) -> Knee:
    """The knee of one tier over a run's steps."""
    s = settings or KneeSettings()
    pts = curve(steps, tier)
    found = {
        "throughput": _throughput_knee(pts, s.ratio),
        "goodput": _goodput_knee(pts),
    }
    lat, base = _latency_knee(pts, s.k, s.metric)
    found["latency"] = lat
    used: str | None = None
    for method in (s.method, *KNEE_METHODS):
        if found[method] is not None:
            used = method
            break
    if len(pts) < 2:
        # One load level is a point, not a curve: there is nothing to find a knee on.
        found = {"throughput": None, "goodput": None, "latency": None}
        lat = None
        used = None
    if not pts:
        note = "no traffic for this tier"
    elif len(pts) < 2:
        note = "a knee needs at least two load steps (use a ramp, --shape steps or --find-knee)"
    elif used is None:
        note = f"no knee up to {pts[-1][0]:.3g} req/s offered: the target kept up over the whole range"
    elif used != s.method:
        note = f"{s.method} method found no knee in range; using {used}"
    elif found[used] == pts[0][0]:
        note = "saturated already at the lowest load tested: the knee is at or below it"
    else:
        note = ""
    return Knee(tier=tier, throughput=found["throughput"], latency=lat, goodput=found["goodput"], used=used,
                value=None if used is None else found[used], baseline_p95_s=base, note=note)


def detect_knees(steps: Sequence[StepStats], settings: KneeSettings | None = None) -> dict[str, Knee]:
    tiers = sorted({t for s in steps for t in s.tiers})
    return {t: detect_knee(steps, t, settings) for t in tiers}
