"""``--find-knee``: step the rate up until the target saturates, then bisect (pure decisions)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class KneeSearch:
    """Proposes the next probe rate from the verdicts so far.

    Phase 1 multiplies the rate by ``growth`` until a probe saturates (or ``max_rate``).  One
    saturated probe is not yet a knee (the knee module wants two consecutive failing steps), so
    phase 2 confirms it with a probe √growth higher; a confirmation that keeps up sends phase 1 on.
    Phase 3 bisects between the highest rate that kept up and the lowest confirmed saturated one,
    ``bisections`` times.  :meth:`estimate` is the midpoint of the final bracket; the run's knee
    itself comes from the knee module over all probes.
    """

    start: float
    growth: float = 1.5
    bisections: int = 3
    max_rate: float = 1e6
    max_probes: int = 30
    ok_rates: list[float] = field(default_factory=list)
    bad_rates: list[float] = field(default_factory=list)
    bisect_probes: int = 0  # probes made while a confirmed bracket [ok, saturated] already existed

    def __post_init__(self) -> None:
        if self.start <= 0:
            raise ValueError(f"--qps-start must be > 0 for --find-knee, got {self.start}")
        if self.growth <= 1:
            raise ValueError(f"--knee-growth must be > 1, got {self.growth}")

    @property
    def probes(self) -> int:
        return len(self.ok_rates) + len(self.bad_rates)

    def _bad_above(self) -> list[float]:
        lo = max(self.ok_rates) if self.ok_rates else None
        return sorted(b for b in self.bad_rates if lo is None or b > lo)

    def confirmed(self) -> bool:
        return len(self._bad_above()) >= 2

    def observe(self, rate: float, saturated: bool) -> None:
        lo, hi = self.bracket()
        if lo is not None and hi is not None:
            self.bisect_probes += 1
        (self.bad_rates if saturated else self.ok_rates).append(rate)

    def bracket(self) -> tuple[float | None, float | None]:
        """(highest rate that kept up, lowest confirmed saturated rate above it)."""
        lo = max(self.ok_rates) if self.ok_rates else None
        bad = self._bad_above()
        return lo, (bad[0] if len(bad) >= 2 else None)

    def next_rate(self) -> float | None:
        if self.probes >= self.max_probes:
            return None
        lo = max(self.ok_rates) if self.ok_rates else None
        bad = self._bad_above()
        if not bad:  # still stepping up
            if lo is None:
                return self.start
            nxt = lo * self.growth
            return nxt if nxt <= self.max_rate else None
        if len(bad) == 1:  # one saturated probe: confirm it above
            return bad[0] * math.sqrt(self.growth)
        if lo is None:  # saturated from the very first probe: step down
            nxt = bad[0] / self.growth
            return nxt if nxt >= self.start / 100 else None
        if self.bisect_probes >= self.bisections:
            return None
        return (lo + bad[0]) / 2

    def estimate(self) -> float | None:
        lo, hi = self.bracket()
        if lo is None or hi is None:
            return None
        return (lo + hi) / 2
