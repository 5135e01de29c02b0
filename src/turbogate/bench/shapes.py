"""Load shapes: offered rate over time, its integral, and the integral's inverse (pure).

Arrivals are drawn in *operational time* u = Λ(t) = ∫₀ᵗ λ: a unit-rate renewal process there,
mapped back through Λ⁻¹, gives exactly the shape's rate with any gap distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from turbogate.results.schema import Step


@dataclass(frozen=True, slots=True)
class Constant:
    rate: float
    duration: float

    def cumulative(self, t: float) -> float:
        return self.rate * t

    def inverse(self, u: float) -> float:
        return u / self.rate

    def rate_at(self, t: float) -> float:
        return self.rate


@dataclass(frozen=True, slots=True)
class LinearRamp:
    start: float
    end: float
    duration: float

    def rate_at(self, t: float) -> float:
        return self.start + (self.end - self.start) * t / self.duration

    def cumulative(self, t: float) -> float:
        return self.start * t + (self.end - self.start) * t * t / (2 * self.duration)

    def inverse(self, u: float) -> float:
        a = (self.end - self.start) / (2 * self.duration)
        if abs(a) < 1e-12:
            return u / self.start
        # a t² + start t − u = 0, the root that is ≥ 0
        disc = self.start * self.start + 4 * a * u
        return (-self.start + math.sqrt(max(disc, 0.0))) / (2 * a)


@dataclass(frozen=True, slots=True)
class ExpRamp:
    """rate = start · (end/start)^(t/T)."""

    start: float
    end: float
    duration: float

    @property
    def _b(self) -> float:
        return math.log(self.end / self.start) / self.duration

    def rate_at(self, t: float) -> float:
        return float(self.start * (self.end / self.start) ** (t / self.duration))

    def cumulative(self, t: float) -> float:
        b = self._b
        return self.start * t if abs(b) < 1e-12 else self.start * (math.exp(b * t) - 1) / b

    def inverse(self, u: float) -> float:
        b = self._b
        return u / self.start if abs(b) < 1e-12 else math.log1p(b * u / self.start) / b


@dataclass(frozen=True, slots=True)
class Stepped:
    """``n`` steps from start to end rate (evenly spaced), each held ``duration / n``."""

    rates: tuple[float, ...]
    duration: float

    @classmethod
    def sweep(cls, start: float, end: float, n: int, duration: float) -> Stepped:
        if n < 1:
            raise ValueError("steps must be >= 1")
        rates = (start,) if n == 1 else tuple(start + (end - start) * i / (n - 1) for i in range(n))
        return cls(rates, duration)

    @property
    def hold(self) -> float:
        return self.duration / len(self.rates)

    def rate_at(self, t: float) -> float:
        return self.rates[min(len(self.rates) - 1, max(0, int(t // self.hold)))]

    def cumulative(self, t: float) -> float:
        i = min(len(self.rates), int(t // self.hold))
        done = sum(r * self.hold for r in self.rates[:i])  # summed as inverse() sums, so they agree
        return done + (self.rates[i] * (t - i * self.hold) if i < len(self.rates) else 0.0)

    def inverse(self, u: float) -> float:
        acc = 0.0
        for i, r in enumerate(self.rates):
            block = r * self.hold
            if u <= acc + block and r > 0:
                return i * self.hold + (u - acc) / r
            acc += block
        if u <= acc * (1 + 1e-12):  # the very end, up to float rounding
            return self.duration
        return self.duration + 1.0  # beyond the end


Shape = Constant | LinearRamp | ExpRamp | Stepped
SHAPES: tuple[str, ...] = ("constant", "linear", "exponential", "steps")


def make_shape(kind: str, *, start: float, end: float, duration: float, steps: int) -> Shape:
    """Validate and build a shape; errors name the option."""
    if duration <= 0:
        raise ValueError(f"--duration must be > 0, got {duration}")
    if kind not in SHAPES:
        raise ValueError(f"--shape must be one of {', '.join(SHAPES)}, got {kind!r}")
    if kind == "constant":
        if start <= 0:
            raise ValueError(f"--qps must be > 0, got {start}")
        return Constant(start, duration)
    if start < 0 or end < 0 or max(start, end) <= 0:
        raise ValueError(f"--qps-start/--qps-end must be >= 0 and not both 0, got {start}, {end}")
    if kind == "linear":
        if start == 0 and end == 0:
            raise ValueError("linear ramp needs a rate above 0")
        return LinearRamp(start, end, duration)
    if kind == "exponential":
        if start <= 0 or end <= 0:
            raise ValueError("exponential ramp needs --qps-start and --qps-end > 0")
        return ExpRamp(start, end, duration)
    return Stepped.sweep(start, end, steps, duration)


def shape_steps(shape: Shape, bins: int) -> list[Step]:
    """Windows for per-step statistics: the held steps, or ``bins`` equal slices of a ramp."""
    if isinstance(shape, Stepped):
        h = shape.hold
        return [Step(i, i * h, (i + 1) * h, r) for i, r in enumerate(shape.rates)]
    n = 1 if isinstance(shape, Constant) else max(1, bins)
    w = shape.duration / n
    out = []
    for i in range(n):
        a, b = i * w, (i + 1) * w
        out.append(Step(i, a, b, (shape.cumulative(b) - shape.cumulative(a)) / w))
    return out
