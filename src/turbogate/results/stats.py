"""Summary statistics of a run: per load step and per tier (pure; no I/O).

Attribution (documented in docs/results-schema.md):

- latency, dispatch lag, error and shed rates: the requests *scheduled* in the step;
- achieved throughput, token throughput and goodput: the successful requests *finishing* inside
  the step's window, divided by the window's length — so an overloaded step shows what the target
  actually completed, not what the client offered.  The completion window is the step's window
  shifted by the group's own median time from schedule to completion in that step (the run's *fill
  time*, the median E2E at the lowest load, when nothing succeeded), so no step is charged for the
  pipeline filling up, nor for latency that grows along a ramp, and the last one counts its own tail.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from turbogate.results.percentile import percentile_sorted
from turbogate.results.schema import ALL, RequestRecord, Step

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
LATENCY_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2e", "lag", "queue")


@dataclass(frozen=True, slots=True)
class SLO:
    """Per-request objectives; a request is *good* when it succeeded and meets every one set."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def is_set(self) -> bool:
        return any(v is not None for v in (self.ttft_s, self.tpot_s, self.e2e_s))

    def met_by(self, r: RequestRecord) -> bool:
        if not r.ok:
            return False
        if self.ttft_s is not None and (r.ttft_s is None or r.ttft_s > self.ttft_s):
            return False
        if self.e2e_s is not None and (r.e2e_s is None or r.e2e_s > self.e2e_s):
            return False
        # TPOT is undefined for one-token outputs: nothing to violate then.
        return self.tpot_s is None or r.tpot_s is None or r.tpot_s <= self.tpot_s

    def to_dict(self) -> dict[str, float | None]:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SLO:
        def get(k: str) -> float | None:
            v = d.get(k)
            return None if v is None else float(v)

        return cls(ttft_s=get("ttft_s"), tpot_s=get("tpot_s"), e2e_s=get("e2e_s"))


@dataclass(frozen=True, slots=True)
class Dist:
    """Mean and percentiles of one latency metric (seconds); all None when there is no value."""

    n: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float], censored: int = 0) -> Dist:
        """``censored`` values are known only to exceed every measured one (requests still running when
        the run ended): they rank above all values, so a percentile that falls among them, and the
        mean and max, are unknown (None) rather than a survivors-only figure."""
        if not values and not censored:
            return cls(0, None, None, None, None, None, None)
        ordered = sorted(float(v) for v in values) + [math.inf] * censored
        pct = [p if p is not None and math.isfinite(p) else None
               for p in (percentile_sorted(ordered, q) for q in PERCENTILES)]
        known = not censored and len(values) > 0
        return cls(len(values), float(np.mean(values)) if known else None, pct[0], pct[1], pct[2], pct[3],
                   ordered[-1] if known else None)

    def get(self, stat: str) -> float | None:
        value: float | None = getattr(self, stat)
        return value

    def to_dict(self) -> dict[str, float | int | None]:
        return {"n": self.n, "mean": self.mean, "p50": self.p50, "p90": self.p90, "p95": self.p95,
                "p99": self.p99, "max": self.max}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Dist:
        def get(k: str) -> float | None:
            v = d.get(k)
            return None if v is None else float(v)

        return cls(int(d.get("n", 0)), get("mean"), get("p50"), get("p90"), get("p95"), get("p99"), get("max"))


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Statistics of one (step, tier) group."""

    requests: int  # scheduled in the step
    sent: int
    ok: int
    errors: int  # sent and failed, shed included; unfinished ones not
    shed: int  # 429 / 503
    error_rate: float  # errors / answered (sent − unfinished)
    shed_rate: float
    offered_rps: float  # requests of this tier scheduled in the step per second (realized, not nominal)
    achieved_rps: float  # successful completions inside the window per second
    goodput_rps: float  # completions inside the window meeting every SLO per second
    input_tokens_per_s: float
    output_tokens_per_s: float
    latency: Mapping[str, Dist] = field(default_factory=dict)  # keys: LATENCY_METRICS
    server_timing_ms: Mapping[str, float] = field(default_factory=dict)  # mean dur per part
    tiers_served: Mapping[str, int] = field(default_factory=dict)
    unfinished: int = 0  # sent and still running when the drain / grace time ran out

    @property
    def unfinished_rate(self) -> float:
        return self.unfinished / self.sent if self.sent else 0.0

    def pct(self, metric: str, stat: str = "p95") -> float | None:
        d = self.latency.get(metric)
        return None if d is None else d.get(stat)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests, "sent": self.sent, "ok": self.ok, "errors": self.errors, "shed": self.shed,
            "error_rate": self.error_rate, "shed_rate": self.shed_rate, "offered_rps": self.offered_rps,
            "achieved_rps": self.achieved_rps, "goodput_rps": self.goodput_rps,
            "input_tokens_per_s": self.input_tokens_per_s, "output_tokens_per_s": self.output_tokens_per_s,
            "latency": {k: v.to_dict() for k, v in self.latency.items()},
            "server_timing_ms": dict(self.server_timing_ms), "tiers_served": dict(self.tiers_served),
            "unfinished": self.unfinished,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GroupStats:
        return cls(
            requests=int(d["requests"]), sent=int(d["sent"]), ok=int(d["ok"]), errors=int(d["errors"]),
            shed=int(d["shed"]), error_rate=float(d["error_rate"]), shed_rate=float(d["shed_rate"]),
            offered_rps=float(d["offered_rps"]), achieved_rps=float(d["achieved_rps"]),
            goodput_rps=float(d["goodput_rps"]), input_tokens_per_s=float(d["input_tokens_per_s"]),
            output_tokens_per_s=float(d["output_tokens_per_s"]),
            latency={str(k): Dist.from_dict(v) for k, v in (d.get("latency") or {}).items()},
            server_timing_ms={str(k): float(v) for k, v in (d.get("server_timing_ms") or {}).items()},
            tiers_served={str(k): int(v) for k, v in (d.get("tiers_served") or {}).items()},
            unfinished=int(d.get("unfinished", 0)),
        )


def tier_key(r: RequestRecord) -> str:
    """The tier a request is grouped under: the tier it asked for (ALL when it asked none)."""
    return r.tier_asked or ALL


def _latency(records: Sequence[RequestRecord]) -> dict[str, Dist]:
    ok = [r for r in records if r.ok]
    sent = [r for r in records if r.sent_s is not None]
    # A request still running at the end took longer than any that finished (the drain outlasts them).
    late = sum(1 for r in sent if r.unfinished)
    return {
        "ttft": Dist.of([r.ttft_s for r in ok if r.ttft_s is not None], late),
        "tpot": Dist.of([r.tpot_s for r in ok if r.tpot_s is not None]),
        "itl": Dist.of([x for r in ok for x in r.itl_s]),
        "e2e": Dist.of([r.e2e_s for r in ok if r.e2e_s is not None], late),
        "lag": Dist.of([r.dispatch_lag_s for r in sent]),
        "queue": Dist.of([r.queue_s for r in sent]),
    }


def group_stats(scheduled: Sequence[RequestRecord], finished: Sequence[RequestRecord], window_s: float,
                offered_rps: float, slo: SLO) -> GroupStats:
    """Stats of ``scheduled`` (the step's requests) and ``finished`` (ending in its window)."""
    sent = [r for r in scheduled if r.sent_s is not None]
    ok = [r for r in sent if r.ok]
    unfinished = sum(1 for r in sent if r.unfinished)
    errors = len(sent) - len(ok) - unfinished
    answered = len(sent) - unfinished
    shed = sum(1 for r in sent if r.shed)
    done = [r for r in finished if r.ok]
    window = max(window_s, 1e-9)
    parts: dict[str, list[float]] = {}
    for r in ok:
        for name, dur in r.server_timing_ms.items():
            parts.setdefault(name, []).append(dur)
    served: dict[str, int] = {}
    for r in ok:
        key = r.tier_served or "unknown"
        served[key] = served.get(key, 0) + 1
    return GroupStats(
        requests=len(scheduled),
        sent=len(sent),
        ok=len(ok),
        errors=errors,
        shed=shed,
        error_rate=errors / answered if answered else 0.0,
        shed_rate=shed / answered if answered else 0.0,
        offered_rps=offered_rps,
        achieved_rps=len(done) / window,
        goodput_rps=sum(1 for r in done if slo.met_by(r)) / window,
        input_tokens_per_s=sum(r.prompt_tokens or 0 for r in done) / window,
        output_tokens_per_s=sum(r.output_tokens or 0 for r in done) / window,
        latency=_latency(scheduled),
        server_timing_ms={k: float(np.mean(v)) for k, v in sorted(parts.items())},
        tiers_served=dict(sorted(served.items())),
        unfinished=unfinished,
    )


@dataclass(frozen=True, slots=True)
class StepStats:
    step: Step
    tiers: Mapping[str, GroupStats]  # tier key -> stats; ALL aggregates every tier

    @property
    def offered_rps(self) -> float:
        """The step's offered load as realized: all tiers' requests actually scheduled in it per second (Poisson
        counts stray from the nominal ``step.offered_rps`` by ±1/√n). Curves, the knee and the bands use it."""
        g = self.tiers.get(ALL)
        return g.offered_rps if g is not None and g.offered_rps > 0 else self.step.offered_rps

    def to_dict(self) -> dict[str, Any]:
        return {**self.step.to_dict(), "tiers": {k: v.to_dict() for k, v in self.tiers.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepStats:
        return cls(step=Step.from_dict(d), tiers={str(k): GroupStats.from_dict(v) for k, v in d["tiers"].items()})


def fill_time(records: Iterable[RequestRecord], steps: Sequence[Step]) -> float:
    """Median E2E of the lowest-load step with successes: how long a request takes unloaded."""
    recs = list(records)
    for step in sorted(steps, key=lambda s: s.offered_rps):
        e2e = [r.e2e_s for r in recs if r.step == step.index and r.ok and r.e2e_s is not None]
        if e2e:
            return float(np.median(e2e))
    return 0.0


def real_tiers(records: Iterable[RequestRecord]) -> list[str]:
    """The tiers requests asked for (requests asking none are only in ALL)."""
    return sorted({r.tier_asked for r in records if r.tier_asked is not None})


def _lead(group: Sequence[RequestRecord]) -> float | None:
    """Median time from schedule to completion of a group's successes: how far its completions trail it."""
    done = [r.end_s - r.scheduled_s for r in group if r.ok and r.end_s is not None]
    return float(np.median(done)) if done else None


def step_stats(records: Iterable[RequestRecord], steps: Sequence[Step], slo: SLO) -> list[StepStats]:
    """Per-step, per-tier statistics (plus the ALL aggregate) of a whole run.

    A group's completion window is the step's window shifted by the group's own median time from schedule
    to completion (the run's fill time when none succeeded): below capacity it then counts exactly the
    step's own requests, whatever their latency — a ramp whose latency grows step by step does not fake a
    shortfall — and at saturation it counts what the target completed while busy, its capacity.
    """
    recs = list(records)
    tiers = real_tiers(recs)
    fill = fill_time(recs, steps)
    ends: dict[str, tuple[list[float], list[RequestRecord]]] = {}
    for key in [*tiers, ALL]:
        done = sorted((r for r in recs if r.end_s is not None and (key == ALL or tier_key(r) == key)),
                      key=lambda r: r.end_s or 0.0)
        ends[key] = ([r.end_s or 0.0 for r in done], done)
    out: list[StepStats] = []
    for step in steps:
        in_step = [r for r in recs if r.step == step.index]
        groups: dict[str, GroupStats] = {}
        width = max(step.duration_s, 1e-9)

        # Offered = what was actually scheduled inside the window (Poisson counts vary around the nominal
        # rate; a window cut short by a stop does not count what was due after it).
        def offered(group: Sequence[RequestRecord], end: float = step.end_s, w: float = width) -> float:
            return sum(1 for r in group if r.scheduled_s < end) / w

        for key in [*tiers, ALL]:
            sched = in_step if key == ALL else [r for r in in_step if tier_key(r) == key]
            lead = _lead(sched)
            shift = fill if lead is None else lead
            times, done = ends[key]
            fin = done[bisect.bisect_left(times, step.start_s + shift):bisect.bisect_left(times, step.end_s + shift)]
            groups[key] = group_stats(sched, fin, step.duration_s, offered(sched), slo)
        out.append(StepStats(step=step, tiers={**{t: groups[t] for t in tiers}, ALL: groups[ALL]}))
    return out


def overall_stats(records: Iterable[RequestRecord], duration_s: float, slo: SLO) -> dict[str, GroupStats]:
    """Whole-run statistics per tier (and ALL): throughput over the run's duration."""
    recs = list(records)
    out: dict[str, GroupStats] = {}
    tiers = real_tiers(recs)
    for tier in [*tiers, ALL]:
        group = recs if tier == ALL else [r for r in recs if tier_key(r) == tier]
        offered = len(group) / duration_s if duration_s > 0 else 0.0
        out[tier] = group_stats(group, [r for r in group if r.end_s is not None], duration_s, offered, slo)
    return out


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
