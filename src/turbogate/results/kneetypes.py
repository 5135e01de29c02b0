"""The knee's values: settings, per-step votes, per-method evidence and the knee itself (pure data).

The rules that fill them are in :mod:`turbogate.results.knee`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from turbogate.results.schema import KNEE_METHODS

Verdict = Literal["knee", "none", "inconclusive", "off"]
StepState = Literal["ok", "fail", "thin", "errors"]
NOISE_FLOOR = 0.3  # least low-load noise assumed for the ratio tests, in units of 1/√(requests)

# One line per method, shown on the report page and in docs/bench.md.
METHOD_TEXT: dict[str, str] = {
    "throughput": "achieved ÷ offered below the level (95 % by default, lower when low-load steps are noisy) "
                  "on enough consecutive steps: the target stopped completing what it was sent; the knee is what "
                  "it completed while saturated (the plateau)",
    "latency": "p95 (of the knee metric) above k × its low-load value (k = 2 by default, more when low-load "
               "steps are noisy) on enough consecutive steps",
    "goodput": "share of offered requests meeting every --slo below the level on enough consecutive steps "
               "(off without --slo)",
}


@dataclass(frozen=True, slots=True)
class KneeSettings:
    method: str = "throughput"
    ratio: float = 0.95
    k: float = 2.0
    metric: str = "e2e"  # latency metric for the latency method
    min_requests: int = 20  # completed requests a step needs to vote
    sustain: int = 2  # consecutive failing steps that make a knee
    z: float = 2.0  # how many noise units a shortfall must exceed (two steps in a row must: p ≈ 0.05 % by chance)
    max_error_rate: float = 0.5  # above this (non-shed) error rate a step cannot vote

    def __post_init__(self) -> None:
        if self.method not in KNEE_METHODS:
            raise ValueError(f"knee method must be one of {', '.join(KNEE_METHODS)}, got {self.method!r}")
        if not 0.0 < self.ratio <= 1.0:
            raise ValueError(f"knee ratio must be in (0, 1], got {self.ratio}")
        if self.k <= 1.0:
            raise ValueError(f"knee k must be > 1, got {self.k}")
        if self.min_requests < 1 or self.sustain < 1 or self.z < 0:
            raise ValueError("knee min_requests and sustain must be >= 1 and z >= 0")

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "ratio": self.ratio, "k": self.k, "metric": self.metric,
                "min_requests": self.min_requests, "sustain": self.sustain, "z": self.z,
                "max_error_rate": self.max_error_rate}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KneeSettings:
        return cls(method=str(d.get("method", "throughput")), ratio=float(d.get("ratio", 0.95)),
                   k=float(d.get("k", 2.0)), metric=str(d.get("metric", "e2e")),
                   min_requests=int(d.get("min_requests", 20)), sustain=int(d.get("sustain", 2)),
                   z=float(d.get("z", 2.0)), max_error_rate=float(d.get("max_error_rate", 0.5)))


@dataclass(frozen=True, slots=True)
class StepVote:
    """One step under one method: the value compared, the level it was compared with, and the outcome."""

    offered_rps: float
    value: float | None  # achieved/offered, goodput/offered, or p95 seconds
    threshold: float | None  # fail below it (ratios) or above it (latency)
    n: int  # completed requests (ratios) or latency samples
    state: StepState

    def to_dict(self) -> dict[str, Any]:
        return {"offered_rps": self.offered_rps, "value": self.value, "threshold": self.threshold, "n": self.n,
                "state": self.state}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepVote:
        v, t = d.get("value"), d.get("threshold")
        state = str(d.get("state", "ok"))
        return cls(offered_rps=float(d["offered_rps"]), value=None if v is None else float(v),
                   threshold=None if t is None else float(t), n=int(d.get("n", 0)),
                   state=state if state in ("ok", "fail", "thin", "errors") else "ok")  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class MethodEvidence:
    """What one method saw: its verdict, the knee it gives, the level, the low-load noise and every step."""

    method: str
    verdict: Verdict
    value: float | None
    confidence: str | None  # "high" | "medium" | "low" (None when off)
    level: float | None  # ratio level (throughput, goodput) or p95 level in seconds (latency)
    noise: float | None  # low-load noise: ratio σ per 1/√n, or relative p95 spread
    baseline: float | None  # latency: the low-load p95 (s)
    reason: str
    steps: tuple[StepVote, ...] = ()
    crossing: float | None = None  # ratio methods: where the ratio first crossed its level (the value is the plateau)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "verdict": self.verdict, "value": self.value, "confidence": self.confidence,
                "level": self.level, "noise": self.noise, "baseline": self.baseline, "reason": self.reason,
                "crossing": self.crossing, "steps": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MethodEvidence:
        def get(k: str) -> float | None:
            v = d.get(k)
            return None if v is None else float(v)

        conf = d.get("confidence")
        verdict = str(d.get("verdict", "none"))
        return cls(method=str(d["method"]),
                   verdict=verdict if verdict in ("knee", "none", "inconclusive", "off") else "none",  # type: ignore[arg-type]
                   value=get("value"), confidence=None if conf is None else str(conf), level=get("level"),
                   noise=get("noise"), baseline=get("baseline"), reason=str(d.get("reason", "")),
                   steps=tuple(StepVote.from_dict(s) for s in d.get("steps") or ()), crossing=get("crossing"))


@dataclass(frozen=True, slots=True)
class Knee:
    tier: str
    throughput: float | None
    latency: float | None
    goodput: float | None
    used: str | None  # the method that gives ``value`` (None: no knee claimed)
    value: float | None
    baseline_p95_s: float | None  # the low-load p95 the latency method compares against
    note: str
    verdict: Verdict = "none"  # of the configured method (or of throughput when that one is off)
    confidence: str | None = None
    evidence: Mapping[str, MethodEvidence] = field(default_factory=dict)

    def by(self, method: str) -> float | None:
        value: float | None = getattr(self, method)
        return value

    def to_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, "throughput": self.throughput, "latency": self.latency,
                "goodput": self.goodput, "used": self.used, "value": self.value,
                "baseline_p95_s": self.baseline_p95_s, "note": self.note, "verdict": self.verdict,
                "confidence": self.confidence, "evidence": {k: v.to_dict() for k, v in self.evidence.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Knee:
        def get(k: str) -> float | None:
            v = d.get(k)
            return None if v is None else float(v)

        used = d.get("used")
        value = get("value")
        verdict = str(d.get("verdict", "knee" if value is not None else "none"))  # schema v1 had no verdict
        conf = d.get("confidence")
        return cls(tier=str(d["tier"]), throughput=get("throughput"), latency=get("latency"),
                   goodput=get("goodput"), used=None if used is None else str(used), value=value,
                   baseline_p95_s=get("baseline_p95_s"), note=str(d.get("note", "")),
                   verdict=verdict if verdict in ("knee", "none", "inconclusive", "off") else "none",  # type: ignore[arg-type]
                   confidence=None if conf is None else str(conf),
                   evidence={str(k): MethodEvidence.from_dict(v) for k, v in (d.get("evidence") or {}).items()})
