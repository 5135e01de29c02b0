"""Roofline step-time model of a continuous-batching engine.

One engine step processes some prefill tokens (chunked prefill) and one decode token for
each running sequence.  Its time is the roofline maximum of

* compute: 2 FLOPs per active parameter per token, plus attention score/value FLOPs over
  the context, at ``mfu`` of the chip's dense tensor throughput, and
* memory: the weights (every expert a batch touches) plus the KV cache of every sequence in
  the step, read once over HBM at ``bw_efficiency`` of peak bandwidth,

plus a fixed per-step host overhead.  Tensor parallelism splits both over ``tp`` chips and
adds a per-step all-reduce cost.  Every factor lives in :class:`PerfFactors`, documented
there, and can be overridden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from turbogate.errors import CatalogError
from turbogate.perf.hardware import GPU, GiB
from turbogate.perf.models import ModelSpec

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "awq": 0.5,
    "gptq": 0.5,
}


def dtype_bytes(dtype: str) -> float:
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise CatalogError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}") from None


@dataclass(frozen=True, slots=True)
class PerfFactors:
    """Efficiency factors of the roofline model (all overridable).

    mfu: fraction of dense tensor FLOP/s reached by large prefill GEMMs; None (the default) takes the
        GPU's own (``GPU.mfu``, e.g. measured by ``turbogate plan profile``) or DEFAULT_MFU (0.5,
        typical of vLLM/SGLang prefill on Hopper at bf16, for GEMMs the size of Llama-3.1-8B's).
    mfu_size_exponent: larger GEMMs per GPU run closer to peak (fewer partial waves, and the
        per-token elementwise work grows with the hidden size while GEMM work grows with its
        square): the MFU grows as (hidden × intermediate ÷ tp ÷ 4096·14336) to this power, from 1
        at 8B's size up (never below ``mfu``).  0.07 lifts Llama-3.3-70B on one GPU to 0.55, the
        least its published TensorRT-LLM 128/128 throughput proves (docs/plan.md); 0 turns it off.
    bw_efficiency: fraction of datasheet HBM bandwidth a decode step achieves streaming
        weights and KV; None (the default) takes the GPU's own (``GPU.bw_efficiency``) or
        DEFAULT_BW_EFFICIENCY (0.8, what memcpy-like kernels reach on H100/A100).
    step_overhead_s: host-side scheduling, sampling and launch time per engine step (CUDA
        graphs keep this near a millisecond in vLLM V1).
    per_seq_overhead_s: extra host time per sequence in a step (sampling, detokenization).
    activation_reserve_bytes: per-GPU memory held back for activations, CUDA graphs and the
        allocator, beyond weights, before the KV cache is sized.
    tp_allreduce_s: latency of one all-reduce (two per layer per step when tp > 1).
    link_efficiency: share of the GPU's one-way link bandwidth (``GPU.link_bandwidth``) an
        all-reduce achieves; a ring all-reduce sends 2(tp−1)/tp of the step's activations
        (tokens × hidden × 2 bytes) over it, twice per layer.
    kv_bw_efficiency: share of datasheet HBM bandwidth the attention kernels reach reading the
        KV cache, where an engine's differs from its weight streaming; None (the default) reads
        the KV at ``bw_efficiency``, as TensorRT-LLM and vLLM do.  An engine property, not a
        GPU's: see ``turbogate.perf.published.SGLANG_KV_BW_EFFICIENCY``.
    frontend_s: time in front of the engine core before a request can be scheduled (API server,
        the hand-over to the scheduler); it adds to TTFT, not to GPU time.
    frontend_per_token_s: front-end time per prompt token (tokenisation, input validation and copying
        the token ids to the engine grow with the prompt); added to ``frontend_s``.
    frontend_per_streamed_token_s: front-end time per token the other running requests stream (a Python
        front end detokenises and sends every streamed token: TensorRT-LLM under Triton or NIM, vLLM's API
        server).  The others keep it busy a share ρ = their tokens/s × this; a new request's own front-end
        work (``frontend_time``) is served in what they leave free and takes ``frontend_time / (1 − ρ)``
        (processor sharing).  0 (the default): the front end is never busy with the others.
    decode_allreduce_s: latency of one all-reduce in a step with no prefill in it; None (the default)
        takes the prefill's (``tp_allreduce_s`` and its growth).  Engines replay decode steps as CUDA
        graphs with a one-shot custom all-reduce (each GPU reads its peers' buffers over NVLink in one
        hop), so it neither pays the eager launch nor grows with ``tp``.
    bw_scale: the engine's streaming rate against the GPU's ``bw_efficiency`` (fitted on one engine's
        measurements); multiplies it however it was chosen, the product at most 1.
    mfu_scale: the engine's share of the GPU's MFU (an older release's kernels fall short of a
        newer one's); multiplies the MFU however it was chosen, before the size growth.
    tp_allreduce_growth_s: extra latency of one all-reduce per doubling of ``tp`` beyond 2 (a ring
        or tree over more GPUs has more hops): latency = tp_allreduce_s + growth × log2(tp / 2).
    ridge_exponent: 0 takes the sharp roofline max(compute, memory); p > 0 takes the p-norm
        (compute^p + memory^p)^(1/p), which is slower near the ridge, where real GEMMs are neither
        bandwidth- nor compute-bound (2^(1/p) at the ridge itself), and the same far from it.
    ttft_steps: decode steps a new request's first token waits beyond its prefill before it is
        returned (vLLM V0's multi-step scheduling hands tokens out every k steps: (k − 1)/2 on average).
    busy_ttft_steps: decode steps a new request's first token waits beyond its prefill when other requests
        are running, on top of ``ttft_steps``; none when the engine was idle.  NIM's TensorRT-LLM shows it:
        its concurrency-1 TTFTs are a front end plus a prefill, while at 5–250 clients every shape's TTFT is
        that plus 3–8 of that load's decode steps (docs/plan.md).  0 (the default): no such wait.
    moe_routing_scale: MoE only: the share of a step's tokens that pick experts independently;
        tokens in one batch pick the same experts more often than independent draws would, so
        fewer experts are read than ``1 − (1 − k/E)^tokens`` says.  1 = independent draws.
    """

    mfu: float | None = None
    mfu_size_exponent: float = 0.07
    bw_efficiency: float | None = None
    step_overhead_s: float = 0.0008
    per_seq_overhead_s: float = 0.000004
    activation_reserve_bytes: float = 2.0 * GiB
    tp_allreduce_s: float = 0.000012
    link_efficiency: float = 0.8
    kv_bw_efficiency: float | None = None
    frontend_s: float = 0.0
    frontend_per_token_s: float = 0.0
    frontend_per_streamed_token_s: float = 0.0
    decode_allreduce_s: float | None = None
    bw_scale: float = 1.0
    mfu_scale: float = 1.0
    tp_allreduce_growth_s: float = 0.0
    ridge_exponent: float = 0.0
    moe_routing_scale: float = 1.0
    ttft_steps: float = 0.0
    busy_ttft_steps: float = 0.0

    def __post_init__(self) -> None:
        for name in ("mfu", "bw_efficiency", "link_efficiency", "kv_bw_efficiency", "moe_routing_scale"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        for name in ("bw_scale", "mfu_scale"):  # a share of the GPU's figure, which may be a conservative one
            if not 0.0 < getattr(self, name) <= 1.5:
                raise ValueError(f"{name} must be in (0, 1.5], got {getattr(self, name)}")
        for name in ("step_overhead_s", "per_seq_overhead_s", "activation_reserve_bytes", "tp_allreduce_s",
                     "mfu_size_exponent", "frontend_s", "tp_allreduce_growth_s", "ridge_exponent", "ttft_steps",
                     "busy_ttft_steps", "frontend_per_token_s", "decode_allreduce_s", "frontend_per_streamed_token_s"):
            if (getattr(self, name) or 0.0) < 0:
                raise ValueError(f"{name} must be >= 0")


DEFAULT_BW_EFFICIENCY = 0.8
DEFAULT_MFU = 0.5
MFU_REFERENCE_GEMM = 4096 * 14336  # hidden × intermediate of Llama-3.1-8B, where ``mfu`` holds as given
ACTIVATION_BYTES = 2.0  # activations all-reduced in bf16, whatever the weight dtype
# The front end's busy share is held below this: past it the streaming itself would slow down (the engine
# waits for its outputs to be taken), which the model does not run; at it a request's front end takes 20×.
FRONTEND_BUSY_CAP = 0.95


def busy_frontend_wait(frontend_s: float, per_streamed_token_s: float, streamed_tokens_per_s: float) -> float:
    """Extra seconds a front-end job of ``frontend_s`` takes while the front end also spends ``per_streamed_token_s``
    on each of ``streamed_tokens_per_s`` tokens the other requests stream: they keep it busy a share
    ρ = min(FRONTEND_BUSY_CAP, per × tokens/s) and the job is served in the rest, ``frontend_s · ρ / (1 − ρ)``
    (processor sharing); 0 when nothing streams or the cost is 0."""
    if per_streamed_token_s <= 0.0 or streamed_tokens_per_s <= 0.0:
        return 0.0
    rho = min(FRONTEND_BUSY_CAP, per_streamed_token_s * streamed_tokens_per_s)
    return frontend_s * rho / (1.0 - rho)


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "bf16") -> int:
    """KV-cache bytes one token occupies: layers × KV heads × head_dim × 2 (K and V) × dtype bytes."""
    return int(model.n_layers * model.n_kv_heads * model.head_dim * 2 * dtype_bytes(kv_dtype))


def weights_bytes(model: ModelSpec, weight_dtype: str = "bf16") -> int:
    return int(model.n_params * dtype_bytes(weight_dtype))


@dataclass(frozen=True, slots=True)
class Deployment:
    """A model served on ``tp`` chips of one GPU type, with its memory and efficiency settings."""

    gpu: GPU
    model: ModelSpec
    tp: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "auto"  # "auto" = same as weights (fp8 weights keep bf16 KV, as vLLM does)
    gpu_mem_util: float = 0.9
    block_size: int = 16
    factors: PerfFactors = field(default_factory=PerfFactors)
    # Constants of ``step_time``, computed once: a simulator calls it millions of times.
    _step_consts: list[float] = field(default_factory=list, init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError("tp must be >= 1")
        if not 0.0 < self.gpu_mem_util <= 1.0:
            raise ValueError(f"gpu_mem_util must be in (0, 1], got {self.gpu_mem_util}")
        if self.block_size < 1:
            raise ValueError("block_size must be >= 1")
        dtype_bytes(self.weight_dtype)
        dtype_bytes(self.effective_kv_dtype)

    def with_factors(self, **changes: float) -> Deployment:
        return replace(self, factors=replace(self.factors, **changes))

    # ---- memory -------------------------------------------------------------------------

    @property
    def effective_kv_dtype(self) -> str:
        if self.kv_dtype != "auto":
            return self.kv_dtype
        return "bf16" if dtype_bytes(self.weight_dtype) < 2 else self.weight_dtype

    @property
    def weights_bytes(self) -> int:
        return weights_bytes(self.model, self.weight_dtype)

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.model, self.effective_kv_dtype)

    @property
    def kv_cache_bytes(self) -> float:
        """Memory left for the KV cache over all ``tp`` chips (0 when the weights do not fit)."""
        budget = self.gpu.hbm_bytes * self.gpu_mem_util * self.tp
        reserve = self.factors.activation_reserve_bytes * self.tp
        return max(0.0, budget - self.weights_bytes - reserve)

    @property
    def fits(self) -> bool:
        return self.kv_cache_bytes >= self.kv_bytes_per_token * self.block_size

    @property
    def kv_capacity_blocks(self) -> int:
        return int(self.kv_cache_bytes // (self.kv_bytes_per_token * self.block_size))

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_capacity_blocks * self.block_size

    # ---- time ---------------------------------------------------------------------------

    @property
    def effective_mfu(self) -> float:
        """``mfu`` grown for GEMMs larger per GPU than Llama-3.1-8B's (``mfu_size_exponent``), at most 1."""
        f = self.factors
        base = f.mfu if f.mfu is not None else (self.gpu.mfu or DEFAULT_MFU)
        size = self.model.hidden_size * self.model.intermediate_size / self.tp / MFU_REFERENCE_GEMM
        grown: float = base * f.mfu_scale * max(1.0, size) ** f.mfu_size_exponent
        return min(1.0, grown)

    @property
    def _flops(self) -> float:
        return self.gpu.flops_for(self.weight_dtype) * self.effective_mfu * self.tp

    @property
    def bw_efficiency(self) -> float:
        """Achieved share of datasheet HBM bandwidth: the factor if set, else the GPU's own, × ``bw_scale``."""
        f = self.factors
        base = f.bw_efficiency if f.bw_efficiency is not None else (self.gpu.bw_efficiency or DEFAULT_BW_EFFICIENCY)
        return min(1.0, base * f.bw_scale)

    @property
    def kv_bw_efficiency(self) -> float:
        """Achieved share of HBM bandwidth reading the KV cache: the factor if set, else ``bw_efficiency``."""
        kv = self.factors.kv_bw_efficiency
        return self.bw_efficiency if kv is None else kv

    @property
    def _kv_read_cost(self) -> float:
        """KV bytes per token, weighted so that one bandwidth serves weights and KV alike: the KV is read
        at ``kv_bw_efficiency``, the weights at ``bw_efficiency`` (exactly the bytes when they agree)."""
        return self.kv_bytes_per_token * (self.bw_efficiency / self.kv_bw_efficiency)

    @property
    def link_bytes_per_s(self) -> float:
        """Achieved one-way GPU-to-GPU bandwidth for all-reduce (0: none in the catalog)."""
        return self.gpu.link_bandwidth * self.factors.link_efficiency

    @property
    def _bandwidth(self) -> float:
        return self.gpu.hbm_bandwidth * self.bw_efficiency * self.tp

    @property
    def allreduce_latency_s(self) -> float:
        """Fixed latency of one all-reduce at this ``tp`` (0 at tp 1): grows per doubling beyond 2."""
        if self.tp <= 1:
            return 0.0
        f = self.factors
        return f.tp_allreduce_s + f.tp_allreduce_growth_s * max(0.0, math.log2(self.tp / 2))

    @property
    def decode_allreduce_latency_s(self) -> float:
        """Fixed latency of one all-reduce in a decode-only step (0 at tp 1)."""
        if self.tp <= 1:
            return 0.0
        graph = self.factors.decode_allreduce_s
        return self.allreduce_latency_s if graph is None else graph

    @property
    def frontend_s(self) -> float:
        """Fixed seconds a request spends in front of the engine core (adds to TTFT only)."""
        return self.factors.frontend_s

    def frontend_time(self, prompt_tokens: int) -> float:
        """Seconds a request of ``prompt_tokens`` spends in front of the engine core (adds to TTFT only)."""
        return self.factors.frontend_s + self.factors.frontend_per_token_s * prompt_tokens

    def frontend_wait(self, prompt_tokens: int, streamed_tokens_per_s: float) -> float:
        """Seconds a request's front end takes beyond ``frontend_time`` while the other running requests stream
        ``streamed_tokens_per_s`` through it (``busy_frontend_wait``)."""
        return busy_frontend_wait(self.frontend_time(prompt_tokens), self.factors.frontend_per_streamed_token_s,
                                  streamed_tokens_per_s)

    def allreduce_time(self, tokens: int, decode_only: bool = False) -> float:
        """Seconds of tensor-parallel communication in a step of ``tokens`` tokens (0 at tp 1)."""
        if self.tp <= 1:
            return 0.0
        per = self.decode_allreduce_latency_s if decode_only else self.allreduce_latency_s
        link = self.link_bytes_per_s
        if link > 0:
            per += 2.0 * (self.tp - 1) / self.tp * tokens * self.model.hidden_size * ACTIVATION_BYTES / link
        return 2 * self.model.n_layers * per

    def _attention_flops(self, query_tokens: float, context_tokens: float) -> float:
        # QK^T and softmax·V: 2 matmuls × 2 FLOPs × heads × head_dim per (query, key) pair.
        m = self.model
        return 4.0 * m.n_layers * m.n_heads * m.head_dim * query_tokens * context_tokens

    def _weights_read_bytes(self, tokens: int) -> float:
        """Weight bytes a step streams: every expert some token in the step is routed to."""
        m = self.model
        wb = dtype_bytes(self.weight_dtype)
        if not m.is_moe:
            return m.n_params * wb
        dense = (m.n_params - m.n_expert_params) * wb
        draws = max(1.0, max(tokens, 1) * self.factors.moe_routing_scale)
        touched: float = 1.0 - (1.0 - m.experts_per_token / m.n_experts) ** draws
        return dense + m.n_expert_params * wb * touched

    def step_time(self, prefill_tokens: int, decode_seqs: int, decode_context_tokens: int,
                  prefill_context_tokens: int = 0, prefill_seqs: int | None = None) -> float:
        """Seconds for one engine step.

        prefill_tokens: prompt tokens computed this step (chunks of one or more requests).
        decode_seqs: sequences producing one token this step.
        decode_context_tokens: total tokens already in the KV cache of those sequences.
        prefill_context_tokens: tokens already cached before the prefill chunks (chunked prefill
            attends to them), summed over chunks.
        prefill_seqs: how many requests the prefill tokens belong to (default 1); attention and
            per-sequence host overhead are per request, not per token.
        """
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        consts = self._step_consts
        if not consts:
            m = self.model
            consts.extend((2.0 * m.n_active_params, 4.0 * m.n_layers * m.n_heads * m.head_dim, self._flops,
                           self._kv_read_cost, self._bandwidth, self.factors.step_overhead_s,
                           self.factors.per_seq_overhead_s, 1.0 if self.model.is_moe or self.tp > 1 else 0.0,
                           self._weights_read_bytes(1)))
        per_param, attn, peak_flops, kv_token, bandwidth, step_over, seq_over, varies, weights = consts
        flops = per_param * tokens
        n_prefill = (prefill_seqs if prefill_seqs and prefill_seqs > 1 else 1) if prefill_tokens > 0 else 0
        # Causal prefill attends on average to half its own chunk plus what was cached before it.
        if n_prefill:
            flops += attn * prefill_tokens * (prefill_tokens / 2.0 + prefill_context_tokens) / n_prefill
        if decode_seqs:
            flops += attn * decode_context_tokens  # decode_seqs × (context / decode_seqs)
        compute_s = flops / peak_flops
        read = weights if not varies else self._weights_read_bytes(tokens)
        memory_s = (read + kv_token * (decode_context_tokens + prefill_context_tokens + tokens)) / bandwidth
        overhead = step_over + seq_over * (decode_seqs + n_prefill)
        if varies:
            overhead += self.allreduce_time(tokens, decode_only=prefill_tokens <= 0)
        ridge = self.factors.ridge_exponent
        if ridge > 0.0:
            return float((compute_s**ridge + memory_s**ridge) ** (1.0 / ridge)) + overhead
        return (compute_s if compute_s > memory_s else memory_s) + overhead

    def prefill_time(self, n_tokens: int, cached_tokens: int = 0) -> float:
        """Seconds to prefill ``n_tokens`` prompt tokens alone in one step."""
        return self.step_time(n_tokens, 0, 0, prefill_context_tokens=cached_tokens)

    def decode_step_time(self, batch_size: int, context_tokens: int) -> float:
        """Seconds for one decode step of ``batch_size`` sequences holding ``context_tokens`` in total."""
        return self.step_time(0, batch_size, context_tokens)

    def decode_compute_bound_batch(self, context_per_seq: int) -> int | None:
        """Smallest decode batch whose compute time exceeds its memory time (None if none ≤ 65,536)."""
        def bound(batch: int) -> bool:
            ctx = batch * context_per_seq
            m = self.model
            flops = 2.0 * m.n_active_params * batch + self._attention_flops(batch, context_per_seq)
            mem = self._weights_read_bytes(batch) + self._kv_read_cost * (ctx + batch)
            return flops / self._flops >= mem / self._bandwidth

        lo, hi = 1, 65536
        if not bound(hi):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if bound(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo


def deployment(gpu: GPU, model: ModelSpec, **kwargs: object) -> Deployment:
    """Build a :class:`Deployment`, failing with a clear message when the weights do not fit."""
    dep = Deployment(gpu, model, **kwargs)  # type: ignore[arg-type]
    if not dep.fits:
        need = dep.weights_bytes / GiB
        have = gpu.hbm_bytes * dep.gpu_mem_util * dep.tp / GiB
        raise CatalogError(
            f"{model.name} in {dep.weight_dtype} needs {need:.1f} GiB of weights but {dep.tp}× {gpu.name} "
            f"offers {have:.1f} GiB at gpu_mem_util={dep.gpu_mem_util}; raise --tp or use a smaller dtype"
        )
    return dep
