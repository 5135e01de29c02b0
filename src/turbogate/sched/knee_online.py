"""The online knee: estimated live from the flow's signals, for a pool with no measured or
predicted knee (pure).

One of the project's four named knees (docs/bench.md, "Four knees"); the others are the measured
knee of a run (results/knee.py) and the planner's predicted and plateau knees (plan/knee.py).

The knee guard (sched/guard.py) needs one number: the offered load (req/s, all tiers) past
which the pool stops keeping up.  Without a bench/sim run or a planner prediction, this module
estimates it from what the flow sees anyway:

* **Turbo queue time** at the gateway (arrival → dispatch) and **Turbo TTFT** (arrival → first
  byte), each an average of the recent requests against its *unloaded baseline* (the lowest
  average seen once enough samples came in);
* **engine saturation** from the scrapes: the pool's mean KV-cache use and mean ``waiting``;
* the **achieved rate** (completions/s) against the **offered rate** (arrivals/s).

Any signal firing means "past the knee"; none firing means "below it".  A verdict must hold for
``confirm_s`` before the estimate moves, so one slow request or one scrape does not:

* past the knee for ``confirm_s``: the knee is what the pool has completed per second since it
  went past (its throughput at saturation, counted over that span, at most the last minute:
  unbiased however idle the pool was before), never above the rate offered over the same span;
* below it for ``confirm_s`` while the offered rate is within ``1/raise_factor`` of the knee: the
  pool carries that load, so the knee is at least that much; the estimate rises to
  ``raise_factor`` × the offered rate (the guard reopens and probes higher; if that saturates,
  the first rule brings the knee back down).

Until the first saturation the knee is unknown (``None``) and the guard stays open.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class OnlineKneePolicy:
    tau_s: float = 5.0  # time constant of the latency averages
    rate_tau_s: float = 20.0  # ... and of the offered and achieved rates (a Poisson rate needs many arrivals)
    confirm_s: float = 3.0  # a verdict holds this long before the estimate moves
    ttft_factor: float = 3.0  # Turbo TTFT this many × its baseline ...
    ttft_floor_s: float = 0.1  # ... and this much above it: past the knee
    queue_floor_s: float = 0.1  # Turbo's mean gateway queue time over this: past the knee
    kv_saturated: float = 0.95  # the pool's mean KV-cache use at or over this: past the knee
    waiting_saturated: float = 1.0  # the pool's mean engine ``waiting`` at or over this: past the knee
    shortfall: float = 0.2  # completions under (1 − shortfall) × arrivals: past the knee ...
    shortfall_min_arrivals: float = 40.0  # ... judged only with this many arrivals in the rate window
    min_baseline_samples: int = 20  # Turbo answers before a TTFT baseline is trusted
    raise_factor: float = 1.3  # below the knee near it: lift the estimate to this × offered
    capped_raise_after_s: float = 60.0  # while the guard caps Turbo, clear signals must last this long
    eval_every_s: float = 0.25  # the signals are read at most this often (the guard asks per arrival)

    def __post_init__(self) -> None:
        if self.tau_s <= 0 or self.rate_tau_s <= 0 or self.confirm_s < 0:
            raise ValueError("tau_s and rate_tau_s must be > 0, confirm_s >= 0")
        if self.ttft_factor <= 1 or self.raise_factor <= 1:
            raise ValueError("ttft_factor and raise_factor must be > 1")
        if not 0 < self.shortfall < 1:
            raise ValueError("shortfall must be in (0, 1)")


@dataclass(slots=True)
class _Rate:
    """Events per second, an exponentially decaying count."""

    tau: float
    value: float = 0.0
    at: float = 0.0

    def get(self, now: float) -> float:
        dt = now - self.at
        return self.value * math.exp(-dt / self.tau) if dt > 0 else self.value

    def add(self, now: float) -> None:
        self.value = self.get(now) + 1.0 / self.tau
        self.at = now


@dataclass(slots=True)
class _Mean:
    """A latency's recent average (per sample, weight 1/tau per second since the last), its
    sample count, and when it was last fed (a stale one says nothing)."""

    tau: float
    value: float = 0.0
    n: int = 0
    at: float = -math.inf

    def add(self, x: float, now: float) -> None:
        if self.n == 0:
            self.value = x
        else:  # at least 1/20 per sample, more when the samples are sparse
            w = max(0.05, -math.expm1(-(now - self.at) / self.tau))
            self.value += w * (x - self.value)
        self.n += 1
        self.at = now

    def fresh(self, now: float) -> bool:
        return self.n > 0 and now - self.at <= 2 * self.tau


@dataclass(slots=True)
class OnlineKnee:
    """One pool's online knee estimate.  Feed it the flow's events; read ``knee(now)``."""

    policy: OnlineKneePolicy = field(default_factory=OnlineKneePolicy)
    knee_rps: float | None = None
    offered: _Rate = field(init=False)
    achieved: _Rate = field(init=False)
    turbo_ttft: _Mean = field(init=False)
    turbo_queue: _Mean = field(init=False)
    ttft_baseline: float = math.inf
    replicas: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # kv, waiting
    reasons: tuple[str, ...] = ()  # the signals firing at the last update
    _verdict: bool | None = None  # True: past the knee
    _verdict_since: float = 0.0
    _moved_at: float = -math.inf
    _eval_at: float = -math.inf
    arrivals: int = 0
    completions: int = 0
    _past_from: tuple[float, int, int] = (0.0, 0, 0)  # when the pool went past the knee, and the counts then

    def __post_init__(self) -> None:
        p = self.policy
        self.offered, self.achieved = _Rate(p.rate_tau_s), _Rate(p.rate_tau_s)
        self.turbo_ttft, self.turbo_queue = _Mean(p.tau_s), _Mean(p.tau_s)

    # ---- the flow's events -----------------------------------------------------------------
    def arrived(self, now: float) -> None:
        self.offered.add(now)
        self.arrivals += 1

    def dispatched(self, turbo: bool, queue_s: float, now: float) -> None:
        if turbo:
            self.turbo_queue.add(queue_s, now)

    def first_byte(self, turbo: bool, ttft_s: float, now: float) -> None:
        if turbo:
            m = self.turbo_ttft
            m.add(ttft_s, now)
            if m.n >= self.policy.min_baseline_samples:
                self.ttft_baseline = min(self.ttft_baseline, m.value)

    def completed(self, now: float) -> None:
        self.achieved.add(now)
        self.completions += 1

    def scraped(self, replica: str, kv_usage: float | None, waiting: float | None) -> None:
        self.replicas[replica] = (kv_usage, waiting)

    # ---- the estimate ------------------------------------------------------------------------
    def signals(self, now: float) -> list[str]:
        """The saturation signals firing at ``now``, in words (empty: below the knee)."""
        p = self.policy
        out: list[str] = []
        ttft = self.turbo_ttft
        base = self.ttft_baseline
        if ttft.fresh(now) and math.isfinite(base) and ttft.value > p.ttft_factor * base \
                and ttft.value - base > p.ttft_floor_s:
            out.append(f"Turbo TTFT {ttft.value * 1000:.0f} ms = {ttft.value / max(base, 1e-9):.1f}× its "
                       f"baseline {base * 1000:.0f} ms")
        queue = self.turbo_queue
        if queue.fresh(now) and queue.value > p.queue_floor_s:
            out.append(f"Turbo queue time {queue.value * 1000:.0f} ms")
        kvs = [kv for kv, _ in self.replicas.values() if kv is not None]
        if kvs and sum(kvs) / len(kvs) >= p.kv_saturated:
            out.append(f"KV cache {sum(kvs) / len(kvs):.0%} used")
        waits = [w for _, w in self.replicas.values() if w is not None]
        if waits and sum(waits) / len(waits) >= p.waiting_saturated:
            out.append(f"{sum(waits) / len(waits):.1f} waiting per engine")
        offered, achieved = self.offered.get(now), self.achieved.get(now)
        # Only with enough arrivals in the window to tell a shortfall from noise.
        if offered * p.rate_tau_s >= p.shortfall_min_arrivals and achieved < (1 - p.shortfall) * offered:
            out.append(f"completing {achieved:.2f} of {offered:.2f} req/s offered")
        return out

    def knee(self, now: float, capped: bool = False) -> float | None:
        """The knee in force at ``now`` (req/s, all tiers); ``None`` until the pool first saturates.
        ``capped``: the guard is holding Turbo back, which itself clears the Turbo signals, so
        the estimate rises only after ``capped_raise_after_s`` of clear signals (a slow probe)."""
        p = self.policy
        if now - self._eval_at < p.eval_every_s:
            return self.knee_rps
        self._eval_at = now
        reasons = self.signals(now)
        self.reasons = tuple(reasons)
        past = bool(reasons)
        if past is not self._verdict:
            self._verdict, self._verdict_since = past, now
            self._past_from = (now, self.arrivals, self.completions)
        hold = p.capped_raise_after_s if capped and not past else p.confirm_s
        if now - self._verdict_since < hold or now - self._moved_at < p.confirm_s:
            return self.knee_rps
        offered = self.offered.get(now)
        if past:
            since, arrivals, completions = self._past_from
            span = now - since
            achieved = min(self.completions - completions, self.arrivals - arrivals) / span if span > 0 else 0.0
            if span > 60.0:  # count over the last minute at most: the pool may change
                self._past_from = (now, self.arrivals, self.completions)
            if achieved > 0 and achieved != self.knee_rps:
                self.knee_rps, self._moved_at = achieved, now
        elif self.knee_rps is not None and offered * p.raise_factor > self.knee_rps:
            self.knee_rps, self._moved_at = offered * p.raise_factor, now
        return self.knee_rps

    def describe(self, now: float) -> dict[str, object]:
        base = self.ttft_baseline
        return {"signals": list(self.reasons), "offered_rps": round(self.offered.get(now), 3),
                "achieved_rps": round(self.achieved.get(now), 3),
                "turbo_ttft_ms": round(self.turbo_ttft.value * 1000, 1) if self.turbo_ttft.n else None,
                "turbo_ttft_baseline_ms": round(base * 1000, 1) if math.isfinite(base) else None,
                "turbo_queue_ms": round(self.turbo_queue.value * 1000, 1) if self.turbo_queue.n else None}
