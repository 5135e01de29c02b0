"""``plan capacity``: memory, step times, saturation and latency against load (pure).

Everything comes from one :class:`~turbogate.perf.Deployment` and the load model of
:mod:`turbogate.plan.latency`; nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from turbogate.perf import Deployment, GiB, saturation
from turbogate.perf.default_workload import OUTPUT_TOKENS, PROMPT_TOKENS
from turbogate.plan.knee import DEFAULT_KNEE_FACTOR, predicted_knee
from turbogate.plan.latency import LatencyModel, LoadPoint, latency_model

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 8, 32, 64, 128, 256)
DEFAULT_LOAD_FRACTIONS: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.1)


def naive_bw_util(qps: float, kv_bytes_per_token: float, seq_len: float, peak_bandwidth: float) -> float:
    """The formula in circulation: ``qps × kv_bytes_per_token × seq_len / peak_bandwidth``.

    Units: (1/s) × (B/token) × token / (B/s) — dimensionless.  What it measures is the rate at
    which new KV bytes are *written* (each request writes ``seq_len`` tokens of KV once), as a
    fraction of peak HBM bandwidth.  It is not what saturates decode (see ``docs/plan.md``).
    """
    if peak_bandwidth <= 0:
        raise ValueError("peak_bandwidth must be > 0")
    return qps * kv_bytes_per_token * seq_len / peak_bandwidth


def busy_share(rate: float, e2e_s: float, saturation_rate: float) -> float:
    """Share of time the replica has work: 1 − e^(−rate × E2E), the chance that at least one
    request is in flight when requests arrive as a Poisson stream (1 at saturation)."""
    if rate >= saturation_rate or not math.isfinite(e2e_s):
        return 1.0
    return -math.expm1(-rate * e2e_s)


def hbm_traffic_per_s(dep: Deployment, model: LatencyModel, rate: float) -> float:
    """Bytes/s the replica moves over HBM at ``rate``: every step reads all weights and the KV of
    every running sequence and writes the new tokens' KV (dense weights, all experts counted)."""
    n = model.batch(rate)
    step = model.tpot(rate)
    if n <= 0.0 or step <= 0.0:
        return 0.0
    ctx = model.prompt_tokens + model.output_tokens / 2.0
    prefill_per_step = rate * step * model.prompt_tokens if rate < model.saturation_rate else (
        n * model.prompt_tokens / model.output_tokens)
    per_step = dep.weights_bytes + dep.kv_bytes_per_token * (n * ctx + n + prefill_per_step)
    return per_step / step


@dataclass(frozen=True, slots=True)
class DecodeRow:
    batch: int
    step_time_s: float
    output_tokens_per_s: float
    bound: str  # "memory" or "compute"


@dataclass(frozen=True, slots=True)
class RatePoint:
    point: LoadPoint
    naive_bw_util: float
    hbm_util: float  # modelled HBM bytes/s over datasheet peak, averaged over time (idle time counts)
    hbm_util_busy: float  # the same while the replica is busy (what a profiler shows during a step)


@dataclass(frozen=True, slots=True)
class CapacityReport:
    gpu: str
    model: str
    tp: int
    weight_dtype: str
    kv_dtype: str
    gpu_mem_util: float
    prompt_tokens: int
    output_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    weights_bytes: int
    kv_bytes_per_token: int
    kv_cache_bytes: float
    kv_capacity_tokens: int
    kv_capacity_blocks: int
    kv_concurrent_seqs: int  # sequences of the mean footprint the KV cache holds
    prefill_time_s: float  # the prompt alone in one step
    ttft0_s: float  # unloaded TTFT (chunked as the token budget requires)
    compute_bound_batch: int | None
    decode: tuple[DecodeRow, ...]
    saturation_batch: int
    saturation_bound: str
    saturation_step_s: float
    saturation_rate: float
    max_output_tokens_per_s: float  # at saturation, prefill mixed in
    peak_decode_tokens_per_s: float  # decode only, at the saturation batch
    knee_factor: float
    knee_rate: float
    rates: tuple[RatePoint, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "model": self.model,
            "tp": self.tp,
            "weight_dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
            "gpu_mem_util": self.gpu_mem_util,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "weights_bytes": self.weights_bytes,
            "weights_gib": self.weights_bytes / GiB,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_cache_gib": self.kv_cache_bytes / GiB,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "kv_capacity_blocks": self.kv_capacity_blocks,
            "kv_concurrent_seqs": self.kv_concurrent_seqs,
            "prefill_time_s": self.prefill_time_s,
            "ttft0_s": self.ttft0_s,
            "compute_bound_batch": self.compute_bound_batch,
            "decode": [
                {"batch": d.batch, "step_time_s": d.step_time_s, "output_tokens_per_s": d.output_tokens_per_s,
                 "bound": d.bound}
                for d in self.decode
            ],
            "saturation": {
                "batch": self.saturation_batch,
                "bound": self.saturation_bound,
                "step_time_s": self.saturation_step_s,
                "request_rate": self.saturation_rate,
                "output_tokens_per_s": self.max_output_tokens_per_s,
            },
            "max_output_tokens_per_s": self.max_output_tokens_per_s,
            "peak_decode_tokens_per_s": self.peak_decode_tokens_per_s,
            "knee": {"factor": self.knee_factor, "rate": self.knee_rate, "method": "predicted-e2e"},
            "rates": [
                {**r.point.to_dict(), "naive_bw_util": r.naive_bw_util, "hbm_util": r.hbm_util,
                 "hbm_util_busy": r.hbm_util_busy} for r in self.rates
            ],
        }


def capacity(
    dep: Deployment,
    prompt_tokens: int = PROMPT_TOKENS,
    output_tokens: int = OUTPUT_TOKENS,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    rates: Sequence[float] | None = None,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    knee_factor: float = DEFAULT_KNEE_FACTOR,
) -> CapacityReport:
    """The full capacity picture of one replica for one request shape.

    ``rates`` defaults to :data:`DEFAULT_LOAD_FRACTIONS` of the saturation rate.
    """
    model = latency_model(dep, prompt_tokens, output_tokens, max_num_seqs, max_num_batched_tokens)
    sat = saturation(dep, prompt_tokens, output_tokens, max_num_seqs, max_num_batched_tokens)
    ctx_seq = int(prompt_tokens + output_tokens / 2.0)
    cb = dep.decode_compute_bound_batch(ctx_seq)
    decode_rows = []
    for b in batch_sizes:
        if b < 1:
            raise ValueError("batch sizes must be >= 1")
        t = dep.decode_step_time(b, b * ctx_seq)
        decode_rows.append(DecodeRow(b, t, b / t, "compute" if cb is not None and b >= cb else "memory"))
    if rates is None:
        rates = [f * model.saturation_rate for f in DEFAULT_LOAD_FRACTIONS]
    points = []
    for r in rates:
        if r < 0 or not math.isfinite(r):
            raise ValueError(f"request rate must be a finite number >= 0, got {r}")
        p = model.point(r)
        naive = naive_bw_util(r, dep.kv_bytes_per_token, prompt_tokens + output_tokens, dep.gpu.hbm_bandwidth * dep.tp)
        hbm = hbm_traffic_per_s(dep, model, r) / (dep.gpu.hbm_bandwidth * dep.tp)
        points.append(RatePoint(p, naive, hbm * busy_share(r, p.e2e_s, model.saturation_rate), hbm))
    peak_decode = sat.batch / dep.decode_step_time(sat.batch, sat.batch * ctx_seq)
    return CapacityReport(
        gpu=dep.gpu.name,
        model=dep.model.name,
        tp=dep.tp,
        weight_dtype=dep.weight_dtype,
        kv_dtype=dep.effective_kv_dtype,
        gpu_mem_util=dep.gpu_mem_util,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        weights_bytes=dep.weights_bytes,
        kv_bytes_per_token=dep.kv_bytes_per_token,
        kv_cache_bytes=dep.kv_cache_bytes,
        kv_capacity_tokens=dep.kv_capacity_tokens,
        kv_capacity_blocks=dep.kv_capacity_blocks,
        kv_concurrent_seqs=int(dep.kv_capacity_tokens // model.kv_tokens_per_seq),
        prefill_time_s=dep.prefill_time(prompt_tokens),
        ttft0_s=model.ttft0,
        compute_bound_batch=cb,
        decode=tuple(decode_rows),
        saturation_batch=sat.batch,
        saturation_bound=sat.bound,
        saturation_step_s=sat.step_time_s,
        saturation_rate=sat.request_rate,
        max_output_tokens_per_s=sat.output_tokens_per_s,
        peak_decode_tokens_per_s=peak_decode,
        knee_factor=knee_factor,
        knee_rate=predicted_knee(model, knee_factor),
        rates=tuple(points),
    )
