"""``summary.json``: what a run was, and what it measured or predicted (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from turbogate.results.fmt import fmt_ms
from turbogate.results.knee import Knee, KneeSettings, detect_knees
from turbogate.results.roi import CostConfig, RoiRow, recommendation, roi_table
from turbogate.results.schema import ALL, KIND_VALUES, READABLE_VERSIONS, SCHEMA_VERSION, RequestRecord, Step
from turbogate.results.stats import SLO, GroupStats, StepStats, overall_stats, step_stats


@dataclass(frozen=True, slots=True)
class Summary:
    schema_version: int
    kind: str  # "bench" | "sim"
    started_at: str  # ISO-8601 UTC wall clock of t = 0
    duration_s: float
    config: Mapping[str, Any]  # the command's settings, free-form but JSON
    slo: SLO
    knee_settings: KneeSettings
    cost: CostConfig
    steps: Sequence[StepStats]
    overall: Mapping[str, GroupStats]
    knees: Mapping[str, Knee]
    roi: Sequence[RoiRow]
    recommendation: str
    interrupted: bool = False
    notes: Sequence[str] = field(default_factory=tuple)
    warnings: Sequence[str] = field(default_factory=tuple)  # what makes the figures doubtful (lag, failure)

    @property
    def tiers(self) -> list[str]:
        """The run's tier keys (ALL last)."""
        return [t for t in self.overall if t != ALL] + [ALL]

    def latency_curve(self, tier: str, metric: str = "e2e", stat: str = "p95") -> list[tuple[float, float | None]]:
        """(offered load as realized, latency stat) per step for one tier, sorted by offered load."""
        pts = [(s.offered_rps, s.tiers[tier].pct(metric, stat)) for s in self.steps
               if tier in s.tiers and s.tiers[tier].sent > 0]
        return sorted(pts, key=lambda p: p[0])

    def throughput_curve(self, tier: str) -> list[tuple[float, float]]:
        """(offered load, achieved req/s of the tier) per step, sorted by offered load."""
        pts = [(s.offered_rps, s.tiers[tier].achieved_rps) for s in self.steps
               if tier in s.tiers and s.tiers[tier].sent > 0]
        return sorted(pts, key=lambda p: p[0])

    def knee(self, tier: str = ALL) -> float | None:
        k = self.knees.get(tier)
        return None if k is None else k.value

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "interrupted": self.interrupted,
            "config": dict(self.config),
            "slo": self.slo.to_dict(),
            "knee_settings": self.knee_settings.to_dict(),
            "cost": self.cost.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
            "overall": {k: v.to_dict() for k, v in self.overall.items()},
            "knees": {k: v.to_dict() for k, v in self.knees.items()},
            "roi": [r.to_dict() for r in self.roi],
            "recommendation": self.recommendation,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Summary:
        version = int(d.get("schema_version", 0))
        if version not in READABLE_VERSIONS:
            raise ValueError(f"summary.json has schema_version {version}; this turbogate reads "
                             f"{', '.join(map(str, READABLE_VERSIONS))}")
        kind = str(d["kind"])
        if kind not in KIND_VALUES:
            raise ValueError(f"summary.json kind must be one of {KIND_VALUES}, got {kind!r}")
        return cls(
            schema_version=version, kind=kind, started_at=str(d["started_at"]), duration_s=float(d["duration_s"]),
            config=dict(d.get("config") or {}), slo=SLO.from_dict(d.get("slo") or {}),
            knee_settings=KneeSettings.from_dict(d.get("knee_settings") or {}),
            cost=CostConfig.from_dict(d.get("cost") or {}),
            steps=[StepStats.from_dict(s) for s in d["steps"]],
            overall={str(k): GroupStats.from_dict(v) for k, v in d["overall"].items()},
            knees={str(k): Knee.from_dict(v) for k, v in d["knees"].items()},
            roi=[RoiRow.from_dict(r) for r in d.get("roi") or []],
            recommendation=str(d.get("recommendation", "")), interrupted=bool(d.get("interrupted", False)),
            notes=[str(n) for n in d.get("notes") or []],
            warnings=[str(n) for n in d.get("warnings") or []],
        )


def cut_at_stop(steps: Sequence[Step], records: Sequence[RequestRecord]) -> list[Step]:
    """An interrupted run: the step running at the stop ends at the last send (later steps sent nothing)."""
    sent = [r.sent_s for r in records if r.sent_s is not None]
    if not sent:
        return list(steps)
    stop = max(sent) + 1e-6
    return [Step(s.index, s.start_s, stop, s.offered_rps) if s.start_s < stop < s.end_s else s for s in steps]


def summarize(records: Iterable[RequestRecord], steps: Sequence[Step], *, kind: str, started_at: str,
              duration_s: float, config: Mapping[str, Any], slo: SLO | None = None,
              knee_settings: KneeSettings | None = None, cost: CostConfig | None = None,
              interrupted: bool = False, notes: Sequence[str] = (), warnings: Sequence[str] = (),
              max_lag_s: float = 0.010) -> Summary:
    """Compute the whole summary from the per-request records — the one place statistics come from.

    With ``interrupted``, the step running at the stop is cut at the last send (see :func:`cut_at_stop`).
    A p99 dispatch lag over ``max_lag_s`` adds a warning (the load generator was the bottleneck) and
    lowers every knee's confidence to "low".
    """
    if kind not in KIND_VALUES:
        raise ValueError(f"kind must be one of {KIND_VALUES}, got {kind!r}")
    recs = list(records)
    if interrupted:
        steps = cut_at_stop(steps, recs)
    slo = slo or SLO()
    ks = knee_settings or KneeSettings()
    cost = cost or CostConfig()
    per_step = step_stats(recs, steps, slo)
    knees = detect_knees(per_step, ks, slo.is_set())
    overall = overall_stats(recs, duration_s, slo)
    warns = list(warnings)
    lag = overall[ALL].pct("lag", "p99") if ALL in overall else None
    if lag is not None and lag > max_lag_s:
        warns.append(f"the load generator was the bottleneck: p99 dispatch lag {fmt_ms(lag)} exceeds "
                     f"{fmt_ms(max_lag_s)}: requests left later than scheduled, so the load was not offered as "
                     "planned; give the bench its own CPU (a quieter machine, fewer req/s per bench process, or "
                     "several processes)")
        knees = {t: replace(k, confidence="low" if k.verdict == "knee" else k.confidence,
                            note=k.note + f" (bench lagged: p99 dispatch lag {fmt_ms(lag)})") for t, k in knees.items()}
    roi = roi_table(per_step, knees, cost)
    stopped = [w for w in warns if w.startswith(("stopped:", "failed:"))]
    advice = f"No recommendation: the run {stopped[0]}" if stopped else recommendation(roi, knees)
    return Summary(
        schema_version=SCHEMA_VERSION, kind=kind, started_at=started_at, duration_s=duration_s, config=config,
        slo=slo, knee_settings=ks, cost=cost, steps=per_step, overall=overall,
        knees=knees, roi=roi, recommendation=advice, interrupted=interrupted, notes=tuple(notes),
        warnings=tuple(warns),
    )


CSV_LATENCY_STATS: tuple[str, ...] = ("mean", "p50", "p90", "p95", "p99")
CSV_COUNTERS: tuple[str, ...] = ("requests", "sent", "ok", "errors", "shed", "error_rate", "shed_rate",
                                 "offered_rps", "achieved_rps", "goodput_rps", "input_tokens_per_s",
                                 "output_tokens_per_s", "unfinished")


def csv_rows(summary: Summary) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of ``summary.csv``: one row per (step, tier)."""
    metrics = ("ttft", "tpot", "itl", "e2e", "lag", "queue")
    header = ["step", "step_offered_rps", "start_s", "end_s", "tier", *CSV_COUNTERS]
    header += [f"{m}_{s}_s" for m in metrics for s in CSV_LATENCY_STATS]
    rows: list[list[Any]] = []
    for st in summary.steps:
        for tier, g in st.tiers.items():
            gd = g.to_dict()
            row: list[Any] = [st.step.index, st.step.offered_rps, st.step.start_s, st.step.end_s, tier]
            row += [gd[c] for c in CSV_COUNTERS]
            row += [g.pct(m, s) for m in metrics for s in CSV_LATENCY_STATS]
            rows.append(row)
    return header, rows
