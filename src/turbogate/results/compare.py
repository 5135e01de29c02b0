"""A/B comparison of two runs (for example Turbo on vs off, or bench vs sim) — pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from turbogate.results.stats import GroupStats
from turbogate.results.summary import Summary


@dataclass(frozen=True, slots=True)
class CompareRow:
    tier: str
    metric: str
    a: float | None
    b: float | None

    @property
    def delta_pct(self) -> float | None:
        """(b − a) / a in percent; None when undefined."""
        if self.a is None or self.b is None or self.a == 0:
            return None
        return (self.b - self.a) / self.a * 100.0


_METRICS: tuple[tuple[str, Callable[[GroupStats], float | None]], ...] = (
    ("achieved req/s", lambda g: g.achieved_rps),
    ("goodput req/s", lambda g: g.goodput_rps),
    ("output tok/s", lambda g: g.output_tokens_per_s),
    ("TTFT p50 s", lambda g: g.pct("ttft", "p50")),
    ("TTFT p95 s", lambda g: g.pct("ttft", "p95")),
    ("TPOT p95 s", lambda g: g.pct("tpot", "p95")),
    ("E2E p95 s", lambda g: g.pct("e2e", "p95")),
    ("E2E p99 s", lambda g: g.pct("e2e", "p99")),
    ("error rate", lambda g: g.error_rate),
    ("shed rate", lambda g: g.shed_rate),
)


def compare(a: Summary, b: Summary) -> list[CompareRow]:
    """Knee and whole-run figures per tier present in either run."""
    tiers = list(dict.fromkeys([*a.tiers, *b.tiers]))
    rows: list[CompareRow] = []
    for tier in tiers:
        rows.append(CompareRow(tier, "knee req/s", a.knee(tier), b.knee(tier)))
        ga, gb = a.overall.get(tier), b.overall.get(tier)
        for name, get in _METRICS:
            rows.append(CompareRow(tier, name, None if ga is None else get(ga), None if gb is None else get(gb)))
    return rows
