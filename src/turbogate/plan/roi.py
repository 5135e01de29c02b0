"""``plan roi``: cost per tier and the ROI of enabling Turbo, per load band (pure).

Terms (each explicit, each a parameter of :class:`RoiInputs`):

- **Fleet cost**: ``price_per_gpu_hour × gpus_per_replica × replicas`` (USD/h), spent whether
  or not the fleet is busy.
- **Memory reuse rate** ``m`` ∈ [0, 1): the share of prompt tokens whose KV is reused from the
  prefix cache (vLLM's prefix-cache hit rate).  Reused tokens skip prefill compute, so a
  replica's saturation rate rises; they still occupy KV blocks, so the batch cap is the one of
  the full prompt.  (Approximation: the step model sees a prompt of ``P·(1−m)`` tokens.)
- **Cold-start penalty**: ``cold_starts_per_hour × cold_start_s`` seconds per hour each replica
  spends loading (a scale-up, a restart, a model swap): billed, not serving.  Capacity is
  multiplied by ``1 − f_cold``, ``f_cold = min(1, cold_starts_per_hour · cold_start_s / 3600)``.
- **Retry decay** with an explicit **max_retries** ``R``: an attempt fails (is shed) with
  probability ``p``; a failed attempt is retried with probability ``d`` (the decay: each
  further retry happens with ``d`` again, so the k-th retry has probability ``(p·d)^k``), and
  never more than ``R`` times.  Expected attempts per request::

      A(p) = Σ_{k=0..R} (p·d)^k = (1 − (p·d)^(R+1)) / (1 − p·d)

  The attempt rate is ``λ·A(p)`` and ``p`` itself is the shed fraction at that rate,
  ``p = max(0, 1 − C / (λ·A(p)))`` for a tier capacity ``C`` — a fixed point (solved by
  iteration from p = 0), which is how retries amplify an overload.  (The published version of
  this function used a ``max_retries`` it never defined; here it is a parameter, default 3.)
- **Turbo price multiplier** ``M`` and **capacity reservation** ``r``: Turbo requests pay
  ``M ×`` the Standard price per token when they meet the Turbo TTFT SLO (and the Standard
  price when they miss it); ``r`` of the fleet's capacity is held for Turbo, so Standard is
  served at most ``(1 − r)·C``; Turbo has priority over everything.
- **Traffic mix**: the share ``t`` of requests asking for Turbo.
- **Latency curves**: per-tier TTFT against load, predicted (the load model's Cobham priority
  split) or measured from a run (``--from-run``).

Cost allocation: Turbo carries ``max(r, its served share of capacity)`` of the fleet cost (it
pays for its reservation even idle), Standard the rest.  Cost per 1M tokens counts prompt and
output tokens.  **ROI of enabling Turbo** at a load = (revenue with Turbo − revenue without)
/ fleet cost over the same hour.  Bands are cut at the knee as the run report does
(:func:`turbogate.results.band_of`): below < 0.8·knee ≤ around ≤ 1.2·knee < above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from turbogate.perf import Deployment, saturation
from turbogate.plan.knee import DEFAULT_KNEE_FACTOR, predicted_knee
from turbogate.plan.latency import LatencyModel, latency_model
from turbogate.results import band_of

# (per-replica request rate, turbo share) -> (Turbo TTFT, Standard TTFT), seconds.
TierLatency = Callable[[float, float], tuple[float, float]]

BAND_MARGIN = 0.2


def expected_attempts(p: float, retry_decay: float, max_retries: int) -> float:
    """``A(p) = Σ_{k=0..R} (p·d)^k``: attempts per request when each failure is retried with
    probability ``d``, at most ``max_retries`` times."""
    if not 0.0 <= p <= 1.0:
        raise ValueError("p must be in [0, 1]")
    if not 0.0 <= retry_decay <= 1.0:
        raise ValueError("retry_decay must be in [0, 1]")
    if max_retries < 0:
        raise ValueError("max_retries must be >= 0")
    q = p * retry_decay
    return float(sum(q**k for k in range(max_retries + 1)))


@dataclass(frozen=True, slots=True)
class RetryOutcome:
    attempt_rate: float  # λ·A(p), attempts/s reaching the tier
    fail_probability: float  # p: share of attempts shed
    served_rate: float  # attempts served/s = successful requests/s
    attempts_per_request: float


def retry_fixed_point(rate: float, capacity: float, retry_decay: float, max_retries: int) -> RetryOutcome:
    """Solve ``p = max(0, 1 − C / (λ·A(p)))`` by monotone iteration from ``p = 0``."""
    if rate < 0 or capacity < 0:
        raise ValueError("rate and capacity must be >= 0")
    if rate == 0:
        return RetryOutcome(0.0, 0.0, 0.0, 1.0)
    p = 0.0
    for _ in range(10_000):
        attempts = rate * expected_attempts(p, retry_decay, max_retries)
        nxt = max(0.0, 1.0 - capacity / attempts) if attempts > 0 else 0.0
        if abs(nxt - p) < 1e-12:
            p = nxt
            break
        p = nxt
    a = expected_attempts(p, retry_decay, max_retries)
    return RetryOutcome(rate * a, p, rate * a * (1.0 - p), a)


def cold_fraction(cold_starts_per_hour: float, cold_start_s: float) -> float:
    if cold_starts_per_hour < 0 or cold_start_s < 0:
        raise ValueError("cold-start terms must be >= 0")
    return min(1.0, cold_starts_per_hour * cold_start_s / 3600.0)


@dataclass(frozen=True, slots=True)
class RoiInputs:
    price_per_gpu_hour: float
    gpus_per_replica: int = 1
    replicas: int = 1
    turbo_multiplier: float = 2.0
    turbo_reservation: float = 0.2
    turbo_share: float = 0.2
    price_per_mtok: float | None = None  # Standard price, USD per 1M tokens; None = break-even at the knee
    turbo_slo_ttft_s: float | None = None  # None = knee_factor × unloaded TTFT
    standard_slo_ttft_s: float | None = None  # None = no Standard SLO
    memory_reuse: float = 0.0
    cold_start_s: float = 0.0
    cold_starts_per_hour: float = 0.0
    retry_decay: float = 0.5
    max_retries: int = 3
    knee_factor: float = DEFAULT_KNEE_FACTOR

    def __post_init__(self) -> None:
        if self.price_per_gpu_hour < 0:
            raise ValueError("price_per_gpu_hour must be >= 0")
        if self.gpus_per_replica < 1 or self.replicas < 1:
            raise ValueError("gpus_per_replica and replicas must be >= 1")
        if self.turbo_multiplier < 1:
            raise ValueError("turbo_multiplier must be >= 1")
        for name in ("turbo_reservation", "turbo_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        if not 0.0 <= self.memory_reuse < 1.0:
            raise ValueError("memory_reuse must be in [0, 1)")
        cold_fraction(self.cold_starts_per_hour, self.cold_start_s)
        expected_attempts(0.0, self.retry_decay, self.max_retries)

    @property
    def fleet_cost_per_hour(self) -> float:
        return self.price_per_gpu_hour * self.gpus_per_replica * self.replicas


def reuse_model(dep: Deployment, prompt_tokens: int, output_tokens: int, memory_reuse: float,
                max_num_seqs: int = 256, max_num_batched_tokens: int = 8192) -> LatencyModel:
    """The load model with ``memory_reuse`` of the prompt served from the prefix cache."""
    if memory_reuse == 0.0:
        return latency_model(dep, prompt_tokens, output_tokens, max_num_seqs, max_num_batched_tokens)
    full = saturation(dep, prompt_tokens, output_tokens, max_num_seqs, max_num_batched_tokens)
    effective = max(1, math.ceil(prompt_tokens * (1.0 - memory_reuse)))
    return latency_model(dep, effective, output_tokens, full.batch, max_num_batched_tokens)


@dataclass(frozen=True, slots=True)
class TierCost:
    tier: str
    offered_rps: float
    served_rps: float
    shed_rate: float  # share of attempts shed
    attempts_per_request: float
    ttft_s: float | None  # None: saturated
    slo_met: bool
    cost_share: float
    cost_per_mtok: float | None
    cost_per_1k_requests: float | None
    revenue_per_hour: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "tier": self.tier, "offered_rps": self.offered_rps, "served_rps": self.served_rps,
            "shed_rate": self.shed_rate, "attempts_per_request": self.attempts_per_request, "ttft_s": self.ttft_s,
            "slo_met": self.slo_met, "cost_share": self.cost_share, "cost_per_mtok": self.cost_per_mtok,
            "cost_per_1k_requests": self.cost_per_1k_requests, "revenue_per_hour": self.revenue_per_hour,
        }


@dataclass(frozen=True, slots=True)
class RoiRow:
    band: str
    load_rps: float  # fleet offered load, requests/s
    turbo_on: tuple[TierCost, ...]  # turbo, standard
    turbo_off: TierCost  # everything standard
    revenue_on: float  # USD/h
    revenue_off: float
    cost_per_hour: float
    roi: float  # (revenue_on − revenue_off) / cost_per_hour

    def to_dict(self) -> dict[str, Any]:
        return {
            "band": self.band, "load_rps": self.load_rps, "turbo_on": [t.to_dict() for t in self.turbo_on],
            "turbo_off": self.turbo_off.to_dict(), "revenue_on_per_hour": self.revenue_on,
            "revenue_off_per_hour": self.revenue_off, "cost_per_hour": self.cost_per_hour, "roi": self.roi,
        }


@dataclass(frozen=True, slots=True)
class RoiReport:
    inputs: RoiInputs
    knee_rps: float  # fleet knee
    saturation_rps: float  # fleet saturation (after cold starts)
    knee_source: str
    price_per_mtok: float
    turbo_slo_ttft_s: float
    tokens_per_request: int
    rows: tuple[RoiRow, ...]

    def to_dict(self) -> dict[str, Any]:
        i = self.inputs
        return {
            "inputs": {
                "price_per_gpu_hour": i.price_per_gpu_hour, "gpus_per_replica": i.gpus_per_replica,
                "replicas": i.replicas, "turbo_multiplier": i.turbo_multiplier,
                "turbo_reservation": i.turbo_reservation, "turbo_share": i.turbo_share,
                "memory_reuse": i.memory_reuse, "cold_start_s": i.cold_start_s,
                "cold_starts_per_hour": i.cold_starts_per_hour, "retry_decay": i.retry_decay,
                "max_retries": i.max_retries, "standard_slo_ttft_s": i.standard_slo_ttft_s,
            },
            "fleet_cost_per_hour": i.fleet_cost_per_hour,
            "knee_rps": self.knee_rps, "knee_source": self.knee_source, "saturation_rps": self.saturation_rps,
            "price_per_mtok": self.price_per_mtok, "turbo_slo_ttft_s": self.turbo_slo_ttft_s,
            "tokens_per_request": self.tokens_per_request,
            "ttft_statistic": "mean",  # every ttft_s below, and the SLO verdicts judge it: a mean hides the tail
            "rows": [r.to_dict() for r in self.rows],
        }


def _per_unit(cost_per_hour: float, share: float, served_rps: float, tokens: int) -> tuple[float | None, float | None]:
    if served_rps <= 0:
        return None, None
    per_request = cost_per_hour * share / (served_rps * 3600.0)
    return per_request * 1e6 / tokens, per_request * 1000.0


def roi(
    model: LatencyModel,
    inputs: RoiInputs,
    loads: Sequence[float] | None = None,
    tier_latency: TierLatency | None = None,
    knee_rps: float | None = None,
    knee_source: str = "predicted",
) -> RoiReport:
    """ROI of enabling Turbo at fleet loads (default: one per band around the fleet knee).

    ``model`` is one replica's load model (memory reuse already applied, see :func:`reuse_model`);
    ``tier_latency`` replaces its predicted per-tier TTFT (a run's measured curves);
    ``knee_rps`` is a per-replica knee that replaces the predicted one.
    """
    i = inputs
    up = 1.0 - cold_fraction(i.cold_starts_per_hour, i.cold_start_s)
    cap = model.saturation_rate * i.replicas * up  # fleet capacity, requests/s
    knee_replica = predicted_knee(model, i.knee_factor) if knee_rps is None else knee_rps
    knee = knee_replica * i.replicas * up
    latency: TierLatency = tier_latency if tier_latency is not None else model.tier_ttft
    tokens = model.prompt_tokens + model.output_tokens
    cost_h = i.fleet_cost_per_hour
    turbo_slo = i.turbo_slo_ttft_s if i.turbo_slo_ttft_s is not None else i.knee_factor * model.ttft0
    if i.price_per_mtok is not None:
        price = i.price_per_mtok
    else:
        at_knee = retry_fixed_point(knee, cap, i.retry_decay, i.max_retries).served_rate
        price = cost_h / (at_knee * 3600.0 * tokens) * 1e6 if at_knee > 0 else 0.0
    per_token = price / 1e6
    if loads is None:
        loads = (0.5 * knee, knee, max(1.5 * knee, 1.1 * cap))

    def replica_rate(served: float) -> float:
        return served / (i.replicas * up) if up > 0 else math.inf

    def ttfts(served_total: float, share: float) -> tuple[float | None, float | None]:
        x = replica_rate(served_total)
        if cap <= 0:
            return None, None
        t, s = latency(x, share)
        return (None if math.isinf(t) else t), (None if math.isinf(s) else s)

    def std_ok(ttft: float | None) -> bool:
        if i.standard_slo_ttft_s is None:
            return True
        return ttft is not None and ttft <= i.standard_slo_ttft_s

    rows: list[RoiRow] = []
    for load in loads:
        if load < 0 or not math.isfinite(load):
            raise ValueError(f"load must be a finite number >= 0, got {load}")
        # Turbo on: Turbo first (priority, whole fleet), Standard inside the rest and under 1 − r.
        turbo = retry_fixed_point(i.turbo_share * load, cap, i.retry_decay, i.max_retries)
        std_cap = max(0.0, min((1.0 - i.turbo_reservation) * cap, cap - turbo.served_rate))
        std = retry_fixed_point((1.0 - i.turbo_share) * load, std_cap, i.retry_decay, i.max_retries)
        served = turbo.served_rate + std.served_rate
        share = turbo.served_rate / served if served > 0 else i.turbo_share
        t_ttft, s_ttft = ttfts(served, share)
        t_ok = t_ttft is not None and t_ttft <= turbo_slo
        s_ok = std_ok(s_ttft)
        t_share = max(i.turbo_reservation, turbo.served_rate / cap if cap > 0 else 0.0)
        t_rev = turbo.served_rate * 3600.0 * tokens * per_token * (i.turbo_multiplier if t_ok else 1.0)
        s_rev = std.served_rate * 3600.0 * tokens * per_token if s_ok else 0.0
        tc = _per_unit(cost_h, t_share, turbo.served_rate, tokens)
        sc = _per_unit(cost_h, 1.0 - t_share, std.served_rate, tokens)
        on = (
            TierCost("turbo", i.turbo_share * load, turbo.served_rate, turbo.fail_probability,
                     turbo.attempts_per_request, t_ttft, t_ok, t_share, tc[0], tc[1], t_rev),
            TierCost("standard", (1.0 - i.turbo_share) * load, std.served_rate, std.fail_probability,
                     std.attempts_per_request, s_ttft, s_ok, 1.0 - t_share, sc[0], sc[1], s_rev),
        )
        # Turbo off: one pool, everything Standard, whole fleet.
        alone = retry_fixed_point(load, cap, i.retry_decay, i.max_retries)
        _t, a_ttft = ttfts(alone.served_rate, 0.0)
        a_ok = std_ok(a_ttft)
        a_rev = alone.served_rate * 3600.0 * tokens * per_token if a_ok else 0.0
        ac = _per_unit(cost_h, 1.0, alone.served_rate, tokens)
        off = TierCost("standard", load, alone.served_rate, alone.fail_probability, alone.attempts_per_request,
                       a_ttft, a_ok, 1.0, ac[0], ac[1], a_rev)
        rev_on = t_rev + s_rev
        rows.append(RoiRow(
            band=band_of(load, knee, BAND_MARGIN), load_rps=load, turbo_on=on, turbo_off=off,
            revenue_on=rev_on, revenue_off=a_rev, cost_per_hour=cost_h,
            roi=(rev_on - a_rev) / cost_h if cost_h > 0 else math.nan,
        ))
    return RoiReport(inputs=i, knee_rps=knee, saturation_rps=cap, knee_source=knee_source, price_per_mtok=price,
                     turbo_slo_ttft_s=turbo_slo, tokens_per_request=tokens, rows=tuple(rows))
