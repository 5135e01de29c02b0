"""Arrival processes and the whole open-loop schedule, computed before the first send (pure)."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from turbogate.bench.shapes import Shape
from turbogate.bench.workload import RequestSpec, Workload
from turbogate.results.schema import Step

ARRIVALS: tuple[str, ...] = ("poisson", "constant", "gamma")


@dataclass(frozen=True, slots=True)
class Arrivals:
    """Gaps of a unit-rate renewal process: Poisson (exponential), constant, or gamma.

    Gamma follows vLLM's ``--burstiness``: shape = burstiness, mean gap 1; burstiness 1 is
    Poisson, below 1 burstier, above 1 more regular.
    """

    kind: str = "poisson"
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ARRIVALS:
            raise ValueError(f"--arrivals must be one of {', '.join(ARRIVALS)}, got {self.kind!r}")
        if self.burstiness <= 0:
            raise ValueError(f"--burstiness must be > 0, got {self.burstiness}")

    def gap(self, rng: random.Random) -> float:
        if self.kind == "poisson":
            return rng.expovariate(1.0)
        if self.kind == "constant":
            return 1.0
        return rng.gammavariate(self.burstiness, 1.0 / self.burstiness)


@dataclass(frozen=True, slots=True)
class Scheduled:
    t: float  # seconds from run start
    step: int
    offered_rps: float
    spec: RequestSpec


def send_times(shape: Shape, arrivals: Arrivals, rng: random.Random) -> list[float]:
    """Absolute send times in [0, duration)."""
    total = shape.cumulative(shape.duration)
    out: list[float] = []
    # Constant gaps start half a gap in, so a step of rate r holds exactly r·T requests.
    u = 0.5 if arrivals.kind == "constant" else arrivals.gap(rng)
    while u < total:
        t = shape.inverse(u)
        if t >= shape.duration:
            break
        out.append(t)
        u += arrivals.gap(rng)
    return out


def build_schedule(shape: Shape, arrivals: Arrivals, workload: Workload, steps: list[Step],
                   rng: random.Random, offset: float = 0.0, step_offset: int = 0) -> list[Scheduled]:
    """Every request of the run with its send time, step and request spec, from one seeded RNG."""
    starts = [s.start_s for s in steps]
    out: list[Scheduled] = []
    for t in send_times(shape, arrivals, rng):
        i = max(0, bisect.bisect_right(starts, t) - 1)
        out.append(Scheduled(t + offset, steps[i].index + step_offset, shape.rate_at(t), workload.make(rng)))
    return out
