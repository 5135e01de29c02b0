"""``--find-knee``: step the rate up until the target saturates, then bisect (pure decisions)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KneeSearch:
    """Proposes the next probe rate from the verdicts so far.

    Phase 1 multiplies the rate by ``growth`` until a probe saturates (or ``max_rate``);
    phase 2 bisects between the highest rate that kept up and the lowest that did not,
    ``bisections`` times.  :meth:`estimate` is the midpoint of the final bracket.
    """

    start: float
    growth: float = 1.5
    bisections: int = 3
    max_rate: float = 1e6
    max_probes: int = 30
    ok_rates: list[float] = field(default_factory=list)
    bad_rates: list[float] = field(default_factory=list)
    bisect_probes: int = 0  # probes made while a bracket [ok, saturated] already existed

    def __post_init__(self) -> None:
        if self.start <= 0:
            raise ValueError(f"--qps-start must be > 0 for --find-knee, got {self.start}")
        if self.growth <= 1:
            raise ValueError(f"--knee-growth must be > 1, got {self.growth}")

    @property
    def probes(self) -> int:
        return len(self.ok_rates) + len(self.bad_rates)

    def observe(self, rate: float, saturated: bool) -> None:
        lo, hi = self.bracket()
        if lo is not None and hi is not None:
            self.bisect_probes += 1
        (self.bad_rates if saturated else self.ok_rates).append(rate)

    def bracket(self) -> tuple[float | None, float | None]:
        lo = max(self.ok_rates) if self.ok_rates else None
        hi = min(self.bad_rates) if self.bad_rates else None
        return lo, hi

    def next_rate(self) -> float | None:
        if self.probes >= self.max_probes:
            return None
        lo, hi = self.bracket()
        if hi is None:  # still stepping up
            if lo is None:
                return self.start
            nxt = lo * self.growth
            return nxt if nxt <= self.max_rate else None
        if lo is None:  # saturated at the very first probe: step down
            nxt = hi / self.growth
            return nxt if nxt >= self.start / 100 else None
        if self.bisect_probes >= self.bisections:
            return None
        return (lo + hi) / 2

    def estimate(self) -> float | None:
        lo, hi = self.bracket()
        if lo is None or hi is None:
            return None
        return (lo + hi) / 2
