"""Calibration: a bench or sim run's measured knee and latency curves beside the prediction (pure).

Takes a loaded :class:`turbogate.results.Summary` (read it with :func:`turbogate.results.load_run`);
does no I/O.  The run's offered loads are fleet-wide; the planner's model is one replica, so
every offered load is divided by ``replicas`` (the replicas the run's target had).

The planner predicts *mean* TTFT and TPOT, so means are compared (``Dist.mean``).  The run's knee
(tier ``all``, from :mod:`turbogate.results.knee`, the one knee module) is compared like with like
(:data:`PREDICTED_FOR`): a throughput or goodput knee — where the fleet stops completing what it is
sent — with the predicted saturation rate; a latency knee with the planner's latency knee (mean E2E
at ``knee_factor`` × its unloaded value).  A run whose knee is "none" or "inconclusive" has no
measured knee, and says which.  The saturation rate is also compared with the highest throughput the
run achieved.  Error = (predicted − measured) / measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from turbogate.plan.knee import predicted_knee
from turbogate.plan.latency import LatencyModel
from turbogate.results import ALL, Summary

# Which prediction a measured knee is compared with, by the knee module's method.
PREDICTED_FOR: dict[str, str] = {"throughput": "saturation", "goodput": "saturation", "latency": "latency-knee"}


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    """(predicted − measured) / measured; None when either is missing or measured is 0."""
    if predicted is None or measured is None or measured == 0 or math.isinf(predicted):
        return None
    return (predicted - measured) / measured


def _finite(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else x


@dataclass(frozen=True, slots=True)
class CurvePoint:
    offered_rps: float  # fleet
    measured_ttft_s: float | None
    predicted_ttft_s: float | None
    measured_tpot_s: float | None
    predicted_tpot_s: float | None
    measured_achieved_rps: float
    predicted_achieved_rps: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "offered_rps": self.offered_rps,
            "measured_ttft_s": self.measured_ttft_s, "predicted_ttft_s": self.predicted_ttft_s,
            "ttft_error": rel_error(self.predicted_ttft_s, self.measured_ttft_s),
            "measured_tpot_s": self.measured_tpot_s, "predicted_tpot_s": self.predicted_tpot_s,
            "tpot_error": rel_error(self.predicted_tpot_s, self.measured_tpot_s),
            "measured_achieved_rps": self.measured_achieved_rps, "predicted_achieved_rps": self.predicted_achieved_rps,
            "achieved_error": rel_error(self.predicted_achieved_rps, self.measured_achieved_rps),
        }


@dataclass(frozen=True, slots=True)
class Calibration:
    kind: str  # "bench" or "sim"
    replicas: int
    measured_knee_rps: float | None  # fleet
    knee_method: str | None
    predicted_knee_rps: float  # fleet; the prediction that matches the measured knee's method
    knee_verdict: str  # the run's: "knee", "none" or "inconclusive"
    knee_confidence: str | None
    knee_note: str
    predicted_as: str  # "saturation" or "latency-knee"
    measured_max_rps: float  # highest achieved throughput, fleet
    predicted_saturation_rps: float  # fleet
    measured_prompt_tokens: float | None  # mean tokens per request the run saw
    measured_output_tokens: float | None
    points: tuple[CurvePoint, ...]
    tier_curves: dict[str, tuple[tuple[float, float], ...]]  # tier -> (fleet offered, mean TTFT)

    @property
    def knee_per_replica(self) -> float | None:
        return None if self.measured_knee_rps is None else self.measured_knee_rps / self.replicas

    def tier_ttft(self, tier: str, fleet_rps: float) -> float | None:
        """Measured mean TTFT of ``tier`` at a fleet load, linear between steps, held past the ends."""
        pts = self.tier_curves.get(tier) or self.tier_curves.get(ALL)
        if not pts:
            return None
        if fleet_rps <= pts[0][0]:
            return pts[0][1]
        for (x0, y0), (x1, y1) in pairwise(pts):
            if fleet_rps <= x1:
                return y0 if x1 == x0 else y0 + (y1 - y0) * (fleet_rps - x0) / (x1 - x0)
        return pts[-1][1]

    def tier_latency(self, per_replica_rps: float, turbo_share: float) -> tuple[float, float]:
        """A :data:`turbogate.plan.roi.TierLatency` from the measured curves (share is the run's own)."""
        del turbo_share
        fleet = per_replica_rps * self.replicas
        t = self.tier_ttft("turbo", fleet)
        s = self.tier_ttft("standard", fleet)
        return (math.inf if t is None else t), (math.inf if s is None else s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "replicas": self.replicas,
            "knee": {"measured_rps": self.measured_knee_rps, "method": self.knee_method,
                     "verdict": self.knee_verdict, "confidence": self.knee_confidence, "note": self.knee_note,
                     "predicted_rps": self.predicted_knee_rps, "predicted_as": self.predicted_as,
                     "error": rel_error(self.predicted_knee_rps, self.measured_knee_rps)},
            "saturation": {"measured_max_rps": self.measured_max_rps, "predicted_rps": self.predicted_saturation_rps,
                           "error": rel_error(self.predicted_saturation_rps, self.measured_max_rps)},
            "measured_prompt_tokens": self.measured_prompt_tokens,
            "measured_output_tokens": self.measured_output_tokens,
            "points": [p.to_dict() for p in self.points],
        }


def calibrate(summary: Summary, model: LatencyModel, replicas: int = 1, knee_factor: float = 2.0) -> Calibration:
    """Predicted against measured for every load step of a run."""
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    points: list[CurvePoint] = []
    for st in sorted(summary.steps, key=lambda s: s.step.offered_rps):
        g = st.tiers.get(ALL)
        if g is None or g.requests == 0:
            continue
        x = st.step.offered_rps / replicas
        ttft = g.latency.get("ttft")
        tpot = g.latency.get("tpot")
        points.append(CurvePoint(
            offered_rps=st.step.offered_rps,
            measured_ttft_s=None if ttft is None else ttft.mean,
            predicted_ttft_s=_finite(model.ttft(x)),
            measured_tpot_s=None if tpot is None else tpot.mean,
            predicted_tpot_s=_finite(model.tpot(x)),
            measured_achieved_rps=g.achieved_rps,
            predicted_achieved_rps=min(x, model.saturation_rate) * replicas,
        ))
    curves: dict[str, tuple[tuple[float, float], ...]] = {}
    for tier in summary.tiers:
        pts = []
        for off, mean in ((s.step.offered_rps, s.tiers[tier].pct("ttft", "mean")) for s in summary.steps
                          if tier in s.tiers and s.tiers[tier].requests > 0):
            if mean is not None:
                pts.append((off, mean))
        curves[tier] = tuple(sorted(pts))
    knee = summary.knees.get(ALL)
    overall = summary.overall.get(ALL)
    prompt = output = None
    if overall is not None and overall.achieved_rps > 0:
        prompt = overall.input_tokens_per_s / overall.achieved_rps
        output = overall.output_tokens_per_s / overall.achieved_rps
    max_rps = max((s.tiers[ALL].achieved_rps for s in summary.steps if ALL in s.tiers), default=0.0)
    method = None if knee is None else knee.used
    predicted_as = PREDICTED_FOR.get(method or "", "latency-knee")
    predicted = model.saturation_rate if predicted_as == "saturation" else predicted_knee(model, knee_factor)
    return Calibration(
        kind=summary.kind, replicas=replicas,
        measured_knee_rps=None if knee is None else knee.value,
        knee_method=method,
        predicted_knee_rps=predicted * replicas,
        knee_verdict="inconclusive" if knee is None else knee.verdict,
        knee_confidence=None if knee is None else knee.confidence,
        knee_note="no tier all in the run" if knee is None else knee.note,
        predicted_as=predicted_as,
        measured_max_rps=max_rps,
        predicted_saturation_rps=model.saturation_rate * replicas,
        measured_prompt_tokens=prompt, measured_output_tokens=output,
        points=tuple(points), tier_curves=curves,
    )

