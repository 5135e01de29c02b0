"""The Turbo decision matrix (pure): Turbo on, Turbo capped, or Standard only — with reasons.

Four rules, each giving a verdict; the recommendation is the most restrictive one
(Standard only > Turbo capped > Turbo on).  The workbook written by :mod:`turbogate.plan.xlsx`
computes the same rules with cell formulas.

1. **Load vs the knee.**  ``x`` = peak request rate per replica.  ``x ≤ knee``: Turbo on
   (priority is cheap, Standard barely notices).  ``knee < x < μ``: Turbo capped at a share
   ``knee / x`` of the traffic, so the prioritised load stays under the knee.  ``x ≥ μ``
   (saturation): Standard only — there is no headroom to sell; priority would starve
   Standard; add replicas first.
2. **KV-cache utilization vs a threshold** (default 65 %).  Predicted KV in use at peak:
   ``batch(x) × mean KV tokens per sequence / KV capacity``.  Above the threshold a Turbo
   burst meets a nearly full cache: admissions wait for blocks and running sequences get
   preempted (vLLM recomputes or swaps them), which is the latency Turbo promised away.
   Verdict: Turbo capped.
3. **LoRA / adapter hot-loading needed.**  Loading an adapter on demand puts its load time in
   front of the first token of the request that needs it; priority cannot remove it.  Verdict:
   Turbo capped (Turbo only for pinned, pre-warmed adapters).
4. **HTTP/2 connection reuse by clients.**  Without reuse (or keep-alive) every request pays
   connection setup (TCP + TLS, two round trips or more) outside any queue the gateway can
   reorder, so the TTFT Turbo sells is not under its control.  Verdict: Turbo capped.
"""

from __future__ import annotations

import math
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from turbogate.errors import TurbogateError
from turbogate.perf import Deployment, deployment
from turbogate.plan.knee import DEFAULT_KNEE_FACTOR, predicted_knee
from turbogate.plan.latency import LatencyModel, latency_model

TURBO_ON = "turbo_on"
TURBO_CAPPED = "turbo_capped"
STANDARD_ONLY = "standard_only"
MODES: tuple[str, ...] = (TURBO_ON, TURBO_CAPPED, STANDARD_ONLY)  # in order of restriction
LABELS: dict[str, str] = {TURBO_ON: "Turbo on", TURBO_CAPPED: "Turbo capped", STANDARD_ONLY: "Standard only"}
DEFAULT_KV_THRESHOLD = 0.65


@dataclass(frozen=True, slots=True)
class MatrixInputs:
    peak_rps: float  # fleet-wide peak request rate
    replicas: int = 1
    kv_threshold: float = DEFAULT_KV_THRESHOLD
    lora_hot_loading: bool = False
    http2_reuse: bool = True
    knee_factor: float = DEFAULT_KNEE_FACTOR

    def __post_init__(self) -> None:
        if self.peak_rps < 0 or not math.isfinite(self.peak_rps):
            raise ValueError("peak_rps must be a finite number >= 0")
        if self.replicas < 1:
            raise ValueError("replicas must be >= 1")
        if not 0.0 < self.kv_threshold <= 1.0:
            raise ValueError("kv_threshold must be in (0, 1]")


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    verdict: str
    reason: str
    value: float | bool | None = None
    limit: float | bool | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    mode: str
    rules: tuple[Rule, ...]
    per_replica_rps: float
    knee_rps: float
    saturation_rps: float
    kv_utilization: float
    turbo_cap_share: float  # the largest share of traffic to grant Turbo (1 = no cap, 0 = none)
    replicas_needed: int  # replicas that put the peak at the knee
    knee_source: str = "predicted"
    notes: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        return LABELS[self.mode]

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "label": self.label,
            "per_replica_rps": self.per_replica_rps,
            "knee_rps": self.knee_rps,
            "knee_source": self.knee_source,
            "saturation_rps": self.saturation_rps,
            "kv_utilization": self.kv_utilization,
            "turbo_cap_share": self.turbo_cap_share,
            "replicas_needed": self.replicas_needed,
            "rules": [
                {"name": r.name, "verdict": r.verdict, "reason": r.reason, "value": r.value, "limit": r.limit}
                for r in self.rules
            ],
            "notes": list(self.notes),
        }


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=MODES.index)


def load_rule(x: float, knee: float, sat: float) -> Rule:
    if x <= knee:
        return Rule("load", TURBO_ON, f"peak {x:.2f} req/s per replica is at or under the knee ({knee:.2f} req/s)",
                    x, knee)
    if x < sat:
        return Rule("load", TURBO_CAPPED,
                    f"peak {x:.2f} req/s per replica is past the knee ({knee:.2f}) but under saturation "
                    f"({sat:.2f}): cap Turbo at {knee / x:.0%} of traffic", x, knee)
    return Rule("load", STANDARD_ONLY,
                f"peak {x:.2f} req/s per replica reaches saturation ({sat:.2f} req/s): no headroom to sell, "
                "priority would starve Standard — add replicas", x, sat)


def kv_rule(util: float, threshold: float) -> Rule:
    if util <= threshold:
        return Rule("kv_utilization", TURBO_ON,
                    f"KV cache {util:.0%} used at peak, under the {threshold:.0%} threshold", util, threshold)
    return Rule("kv_utilization", TURBO_CAPPED,
                f"KV cache {util:.0%} used at peak, over the {threshold:.0%} threshold: Turbo bursts would wait "
                "for blocks or preempt running sequences", util, threshold)


def lora_rule(needed: bool) -> Rule:
    if not needed:
        return Rule("lora_hot_loading", TURBO_ON, "no adapter hot-loading: no load time in front of first tokens",
                    False)
    return Rule("lora_hot_loading", TURBO_CAPPED,
                "adapters are hot-loaded: the load time lands on the first token; grant Turbo only for pinned, "
                "pre-warmed adapters", True)


def http2_rule(reuse: bool) -> Rule:
    if reuse:
        return Rule("http2_reuse", TURBO_ON, "clients reuse HTTP/2 connections: no per-request connection setup",
                    True)
    return Rule("http2_reuse", TURBO_CAPPED,
                "clients do not reuse connections: each request pays TCP+TLS setup no priority can remove; "
                "enable HTTP/2 or keep-alive before selling Turbo latency", False)


def decide(
    model: LatencyModel,
    inputs: MatrixInputs,
    knee_rps: float | None = None,
    saturation_rps: float | None = None,
    knee_source: str = "predicted",
) -> Decision:
    """Apply the four rules.  ``knee_rps`` / ``saturation_rps`` override the predicted ones (a run)."""
    knee = predicted_knee(model, inputs.knee_factor) if knee_rps is None else knee_rps
    sat = model.saturation_rate if saturation_rps is None else saturation_rps
    x = inputs.peak_rps / inputs.replicas
    util = model.kv_utilization(x)
    rules = (load_rule(x, knee, sat), kv_rule(util, inputs.kv_threshold), lora_rule(inputs.lora_hot_loading),
             http2_rule(inputs.http2_reuse))
    mode = worst([r.verdict for r in rules])
    share = 0.0 if mode == STANDARD_ONLY else 1.0 if x <= knee else knee / x
    needed = max(1, math.ceil(inputs.peak_rps / knee)) if knee > 0 else inputs.replicas
    return Decision(mode=mode, rules=rules, per_replica_rps=x, knee_rps=knee, saturation_rps=sat,
                    kv_utilization=util, turbo_cap_share=share, replicas_needed=needed, knee_source=knee_source)


@dataclass(frozen=True, slots=True)
class TpChoice:
    """One tensor-parallel size at a peak: the replicas that put the peak at the knee, and their cost."""

    tp: int
    replicas: int
    knee_rps: float  # per replica
    saturation_rps: float  # per replica
    price_per_gpu_hour: float

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas

    @property
    def cost_per_hour(self) -> float:
        return self.gpus * self.price_per_gpu_hour

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "replicas": self.replicas, "gpus": self.gpus, "knee_rps": self.knee_rps,
                "saturation_rps": self.saturation_rps, "cost_per_hour": self.cost_per_hour}


def fitting_tps(dep: Deployment, prompt: int, output: int, seqs: int, batched: int) -> dict[int, LatencyModel]:
    """The load model at each TP of one 8-GPU node that holds ``dep``'s model (its GPU, dtypes and factors)."""
    out = {}
    for n in (1, 2, 4, 8):
        with suppress(TurbogateError, ValueError):
            out[n] = latency_model(deployment(dep.gpu, dep.model, tp=n, weight_dtype=dep.weight_dtype,
                                              kv_dtype=dep.kv_dtype, gpu_mem_util=dep.gpu_mem_util,
                                              block_size=dep.block_size, factors=dep.factors),
                                   prompt, output, seqs, batched)
    return out


def tp_choices(models: dict[int, LatencyModel], peak_rps: float, price_per_gpu_hour: float,
               knee_factor: float = DEFAULT_KNEE_FACTOR) -> tuple[TpChoice, ...]:
    """For each TP (its load model), the replicas ``⌈peak / knee⌉`` as :func:`decide` counts them;
    cheapest first (fewer GPUs on a tie)."""
    out = []
    for tp, lm in models.items():
        knee = predicted_knee(lm, knee_factor)
        out.append(TpChoice(tp, max(1, math.ceil(peak_rps / knee)), knee, lm.saturation_rate, price_per_gpu_hour))
    return tuple(sorted(out, key=lambda c: (c.cost_per_hour, c.gpus, c.tp)))


# ---- without a peak: up to what load is Turbo on, capped, off? ---------------------------------------


@dataclass(frozen=True, slots=True)
class Band:
    """A range of per-replica load with one recommendation; ``to_rps`` None: no upper end."""

    mode: str
    from_rps: float
    to_rps: float | None
    reasons: tuple[str, ...]

    @property
    def label(self) -> str:
        return LABELS[self.mode]


@dataclass(frozen=True, slots=True)
class Thresholds:
    replicas: int
    knee_rps: float  # per replica
    saturation_rps: float
    kv_limit_rps: float | None  # where KV use passes the threshold; None: not below saturation
    kv_threshold: float
    bands: tuple[Band, ...]
    knee_source: str = "predicted"

    def to_dict(self) -> dict[str, Any]:
        n = self.replicas

        def fleet(x: float | None) -> float | None:
            return None if x is None else x * n

        return {
            "replicas": n, "knee_rps": self.knee_rps, "knee_source": self.knee_source,
            "saturation_rps": self.saturation_rps, "kv_limit_rps": self.kv_limit_rps,
            "kv_threshold": self.kv_threshold,
            "bands": [{"mode": b.mode, "label": b.label, "from_rps_per_replica": b.from_rps,
                       "to_rps_per_replica": b.to_rps, "from_fleet_rps": fleet(b.from_rps),
                       "to_fleet_rps": fleet(b.to_rps), "reasons": list(b.reasons)} for b in self.bands],
        }


def kv_limit(model: LatencyModel, threshold: float) -> float | None:
    """The per-replica rate at which predicted KV use reaches ``threshold`` (None: not below saturation).

    Inverts ``batch(x) = x·O·s_idle / (1 − x·O·δ)`` at the batch that fills ``threshold`` of the cache.
    """
    if model.kv_capacity_tokens <= 0:
        return 0.0
    b = threshold * model.kv_capacity_tokens / model.kv_tokens_per_seq
    if b >= model.batch_cap:
        return None
    return b / (model.output_tokens * (model.s_idle + b * model.delta))


def thresholds(
    model: LatencyModel,
    replicas: int = 1,
    kv_threshold: float = DEFAULT_KV_THRESHOLD,
    lora_hot_loading: bool = False,
    http2_reuse: bool = True,
    knee_factor: float = DEFAULT_KNEE_FACTOR,
    knee_rps: float | None = None,
    saturation_rps: float | None = None,
    knee_source: str = "predicted",
) -> Thresholds:
    """The loads where :func:`decide`'s answer changes, for the same inputs less the peak."""
    MatrixInputs(peak_rps=0.0, replicas=replicas, kv_threshold=kv_threshold)  # the same validation
    knee = predicted_knee(model, knee_factor) if knee_rps is None else knee_rps
    sat = model.saturation_rate if saturation_rps is None else saturation_rps
    x_kv = kv_limit(model, kv_threshold)
    if x_kv is not None and x_kv >= sat:
        x_kv = None
    switches = [r.reason for r in (lora_rule(lora_hot_loading), http2_rule(http2_reuse)) if r.verdict != TURBO_ON]
    on_end = 0.0 if switches else min(knee, math.inf if x_kv is None else x_kv)
    bands: list[Band] = []
    if on_end > 0:
        kv_why = (f"KV use stays under {kv_threshold:.0%} up to saturation" if x_kv is None
                  else f"KV use under {kv_threshold:.0%} up to {x_kv:.2f} req/s")
        bands.append(Band(TURBO_ON, 0.0, on_end, (f"at or under the knee ({knee:.2f} req/s per replica)", kv_why)))
    capped: list[str] = list(switches)
    if knee < sat:
        capped.append(f"past the knee ({knee:.2f} req/s per replica): cap Turbo at knee / load of the traffic")
    if x_kv is not None:
        capped.append(f"from {x_kv:.2f} req/s KV use passes {kv_threshold:.0%}: Turbo bursts would wait for "
                      "blocks or preempt running sequences")
    if on_end < sat:
        bands.append(Band(TURBO_CAPPED, on_end, sat, tuple(capped)))
    bands.append(Band(STANDARD_ONLY, sat, None,
                      (f"saturation ({sat:.2f} req/s per replica): no headroom to sell; add replicas",)))
    return Thresholds(replicas=replicas, knee_rps=knee, saturation_rps=sat, kv_limit_rps=x_kv,
                      kv_threshold=kv_threshold, bands=tuple(bands), knee_source=knee_source)
