"""ROI by load band: is Turbo worth it below, around and above the knee? (pure)

Bands are set by the fleet's knee (tier ALL): *below* < (1 − margin) × knee ≤ *around* ≤
(1 + margin) × knee < *above*.  Cost per 1,000 requests splits the fleet's cost per second over
the tiers in proportion to weight × achieved throughput, so a Turbo request (weight 2 by default)
carries twice a Standard one's share, and every tier's cost rises when throughput falls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from turbogate.results.fmt import fmt_ms, fmt_num
from turbogate.results.knee import Knee
from turbogate.results.schema import ALL
from turbogate.results.stats import StepStats

BANDS: tuple[str, ...] = ("below", "around", "above")


@dataclass(frozen=True, slots=True)
class CostConfig:
    fleet_cost_per_hour: float = 1.0  # cost units per hour of the whole target fleet
    tier_weights: Mapping[str, float] = field(default_factory=lambda: {"turbo": 2.0, "standard": 1.0, "relax": 0.5})

    def weight(self, tier: str) -> float:
        return float(self.tier_weights.get(tier, 1.0))

    def to_dict(self) -> dict[str, Any]:
        return {"fleet_cost_per_hour": self.fleet_cost_per_hour, "tier_weights": dict(self.tier_weights)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CostConfig:
        return cls(fleet_cost_per_hour=float(d.get("fleet_cost_per_hour", 1.0)),
                   tier_weights={str(k): float(v) for k, v in (d.get("tier_weights") or {}).items()})


@dataclass(frozen=True, slots=True)
class RoiRow:
    band: str
    tier: str
    steps: int
    offered_min: float
    offered_max: float
    achieved_rps: float  # mean over the band's steps
    p95_ttft_s: float | None  # mean over the band's steps of the step p95
    p95_e2e_s: float | None
    error_rate: float
    cost_per_1k: float | None
    unfinished: int = 0  # requests still running at the end: the p95s are then lower bounds ("≥")

    def to_dict(self) -> dict[str, Any]:
        return {"band": self.band, "tier": self.tier, "steps": self.steps, "offered_min": self.offered_min,
                "offered_max": self.offered_max, "achieved_rps": self.achieved_rps, "p95_ttft_s": self.p95_ttft_s,
                "p95_e2e_s": self.p95_e2e_s, "error_rate": self.error_rate, "cost_per_1k": self.cost_per_1k,
                "unfinished": self.unfinished}

    def p95(self, metric: str) -> str:
        """The band's p95 for display; "≥ …" when unfinished requests make it a lower bound."""
        v = self.p95_ttft_s if metric == "ttft" else self.p95_e2e_s
        return ("≥ " if self.unfinished and v is not None else "") + fmt_ms(v)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RoiRow:
        def get(k: str) -> float | None:
            v = d.get(k)
            return None if v is None else float(v)

        return cls(band=str(d["band"]), tier=str(d["tier"]), steps=int(d["steps"]),
                   offered_min=float(d["offered_min"]), offered_max=float(d["offered_max"]),
                   achieved_rps=float(d["achieved_rps"]), p95_ttft_s=get("p95_ttft_s"), p95_e2e_s=get("p95_e2e_s"),
                   error_rate=float(d["error_rate"]), cost_per_1k=get("cost_per_1k"),
                   unfinished=int(d.get("unfinished", 0)))


def band_of(offered: float, knee: float | None, margin: float = 0.2) -> str:
    if knee is None or offered < (1 - margin) * knee:
        return "below"
    if offered <= (1 + margin) * knee:
        return "around"
    return "above"


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def roi_table(steps: Sequence[StepStats], knees: Mapping[str, Knee], cost: CostConfig,
              margin: float = 0.2) -> list[RoiRow]:
    """One row per (band, tier) that has steps; tiers are the run's own, ALL last."""
    knee = knees[ALL].value if ALL in knees else None
    tiers = [*sorted({t for s in steps for t in s.tiers if t != ALL}), ALL]
    per_second = cost.fleet_cost_per_hour / 3600.0
    rows: list[RoiRow] = []
    for band in BANDS:
        in_band = [s for s in steps if band_of(s.offered_rps, knee, margin) == band
                   and ALL in s.tiers and s.tiers[ALL].sent > 0]
        if not in_band:
            continue
        # Weighted throughput of the band (all real tiers), the denominator of every tier's share.
        weighted = float(np.mean([sum(cost.weight(t) * g.achieved_rps for t, g in s.tiers.items() if t != ALL)
                                  for s in in_band]))
        for tier in tiers:
            groups = [s.tiers[tier] for s in in_band if tier in s.tiers and s.tiers[tier].requests > 0]
            if not groups:
                continue
            achieved = float(np.mean([g.achieved_rps for g in groups]))
            if tier == ALL:
                cost_1k = 1000.0 * per_second / achieved if achieved > 0 else None
            else:
                cost_1k = 1000.0 * per_second * cost.weight(tier) / weighted if weighted > 0 else None
            rows.append(RoiRow(
                band=band, tier=tier, steps=len(groups),
                offered_min=min(s.offered_rps for s in in_band),
                offered_max=max(s.offered_rps for s in in_band),
                achieved_rps=achieved,
                p95_ttft_s=_mean([g.pct("ttft") for g in groups]),
                p95_e2e_s=_mean([g.pct("e2e") for g in groups]),
                error_rate=float(np.mean([g.error_rate for g in groups])),
                cost_per_1k=cost_1k,
                unfinished=sum(g.unfinished for g in groups),
            ))
    return rows


def gap_words(turbo_s: float | None, standard_s: float | None, standard_at_least: bool = False) -> str:
    """Turbo's p95 TTFT against Standard's in words that follow the ratio: "4.9× lower p95 TTFT (64 ms vs
    315 ms)", "about the same p95 TTFT (…)", "1.3× higher p95 TTFT (…)"; "≥" where Standard's is a lower bound."""
    ge = "≥ " if standard_at_least else ""
    both = f"({fmt_ms(turbo_s)} vs {ge}{fmt_ms(standard_s)})"
    if not turbo_s or not standard_s:
        return f"p95 TTFT {both}"
    ratio = standard_s / turbo_s
    if ratio >= 1.1:
        return f"{ge}{fmt_num(ratio, 2)}× lower p95 TTFT {both}"
    if ratio <= 1 / 1.1:
        return f"{fmt_num(1 / ratio, 2)}× higher p95 TTFT {both}"
    return f"about the same p95 TTFT {both}"


def recommendation(rows: Sequence[RoiRow], knees: Mapping[str, Knee], turbo: str = "turbo",
                   standard: str = "standard", degrade_k: float = 2.0) -> str:
    """One line: where Turbo pays off (it buys latency under contention) and when it stops.

    It names only actions that exist today: the admin switch that turns Turbo off
    (``POST /admin/tiers/turbo``) and adding replicas."""
    knee = knees.get(ALL)
    by = {(r.band, r.tier): r for r in rows}
    top = max((r.offered_max for r in rows), default=0.0)
    levels = {r.offered_min for r in rows} | {r.offered_max for r in rows}
    if knee is not None and knee.value is None and len(levels) < 2:
        return f"One load level only — {knee.note}."
    if knee is not None and knee.verdict == "inconclusive":
        return f"No knee claimed — inconclusive: {knee.note}."
    below_t, below_s = by.get(("below", turbo)), by.get(("below", standard))
    if knee is None or knee.value is None:
        msg = f"No knee up to {fmt_num(top)} req/s: the fleet kept up over the whole range tested"
        if below_t is not None and below_s is not None:
            msg += f"; Turbo had {gap_words(below_t.p95_ttft_s, below_s.p95_ttft_s)}"
        return msg + ". Ramp higher (--qps-end) to find the knee."
    k = knee.value
    msg = f"Fleet knee ≈ {fmt_num(k)} req/s ({knee.used}, {knee.confidence} confidence)."
    hot_t = by.get(("above", turbo)) or by.get(("around", turbo))
    hot_s = by.get(("above", standard)) or by.get(("around", standard))
    if hot_t is None or hot_s is None:
        return msg + " Run a Turbo/Standard mix (--tiers turbo=0.2,standard=0.8) to compare the tiers."
    if below_t is not None and below_s is not None:
        msg += f" Below it Turbo has {gap_words(below_t.p95_ttft_s, below_s.p95_ttft_s, below_s.unfinished > 0)}."
    msg += f" Past it Turbo has {gap_words(hot_t.p95_ttft_s, hot_s.p95_ttft_s, hot_s.unfinished > 0)}."
    if below_t is not None and below_t.p95_ttft_s and hot_t.p95_ttft_s and \
            hot_t.p95_ttft_s > degrade_k * below_t.p95_ttft_s:
        msg += (f" Turbo itself degrades above the knee ({fmt_ms(below_t.p95_ttft_s)} → {fmt_ms(hot_t.p95_ttft_s)}): "
                f"add replicas before the load passes ≈ {fmt_num(k)} req/s, or switch Turbo off there "
                "(POST /admin/tiers/turbo {\"enabled\": false}).")
    else:
        msg += (f" Turbo holds up to {fmt_num(top)} req/s tested: sell it above ≈ {fmt_num(k)} req/s, "
                "where Standard queues.")
    return msg
