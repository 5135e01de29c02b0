"""A trace's workload in numbers (pure): its peak and mean rate, its prompt and output lengths.

``trace_workload`` is what a planner needs from a trace instead of a load shape: the peak
request rate over a sliding bin (a minute by default: a fleet must carry the busiest minute,
not the hour's mean) and the token-length distributions (``turbogate trace show`` prints it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from turbogate.results.percentile import percentile_sorted
from turbogate.trace.format import Trace
from turbogate.trace.replay import rate_series


@dataclass(frozen=True, slots=True)
class Lengths:
    """A token-length distribution: count, mean and the usual percentiles (results/percentile.py's
    rule; NaN for no values)."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[int]) -> Lengths:
        s = sorted(values)
        p50, p90, p99 = (math.nan if p is None else p for p in (percentile_sorted(s, q) for q in (50, 90, 99)))
        return cls(len(s), sum(s) / len(s) if s else math.nan, p50, p90, p99, float(s[-1]) if s else math.nan)


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    requests: int
    duration_s: float
    mean_rps: float
    peak_rps: float  # the busiest bin's rate
    peak_at_s: float  # where that bin starts (trace seconds)
    bin_s: float
    prompt: Lengths  # known lengths only
    output: Lengths
    tenants: int
    tiers_asked: dict[str, int]  # requests per tier the trace asked for ("none": no tier)

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__slots__}
        d["prompt"], d["output"] = vars_of(self.prompt), vars_of(self.output)
        return d


def vars_of(lengths: Lengths) -> dict[str, float]:
    return {k: getattr(lengths, k) for k in Lengths.__slots__}


def trace_workload(trace: Trace, bin_s: float = 60.0, speedup: float = 1.0) -> TraceWorkload:
    """The trace's rates (``speedup`` × as replayed) and lengths; ``bin_s`` in trace seconds."""
    reqs = trace.requests
    duration = trace.duration_s
    series = rate_series([r.t for r in reqs], max(duration, bin_s), bin_s)
    peak_at, peak = max(series, key=lambda p: p[1]) if series else (0.0, 0.0)
    tiers: dict[str, int] = {}
    for r in reqs:
        key = r.tier_asked or "none"
        tiers[key] = tiers.get(key, 0) + 1
    return TraceWorkload(
        requests=len(reqs), duration_s=duration / speedup,
        mean_rps=len(reqs) / duration * speedup if duration > 0 else 0.0, peak_rps=peak * speedup,
        peak_at_s=peak_at, bin_s=bin_s, prompt=Lengths.of([r.prompt_tokens for r in reqs if r.prompt_tokens]),
        output=Lengths.of([r.output_tokens for r in reqs if r.output_tokens]), tenants=len(trace.tenants()),
        tiers_asked=tiers)
