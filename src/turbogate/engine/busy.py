"""What DCGM would report of an emulated GPU: the share of time its SMs, tensor pipes and DRAM
are busy, derived from the roofline step model (pure).

Per engine step the roofline (``perf/roofline.py``) counts the FLOPs and the HBM bytes the step
moves and takes the longer of compute and memory time, plus host overhead.  From the same
counts:

* **tensor** busy (``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``): FLOPs at the chip's datasheet peak, so
  a prefill at 50 % MFU keeps the pipe half busy;
* **DRAM** busy (``DCGM_FI_PROF_DRAM_ACTIVE``): bytes at the datasheet bandwidth, so a decode
  step streaming weights at 80 % of peak reads 0.8;
* **SM** busy (``DCGM_FI_PROF_SM_ACTIVE``): the kernels' time (the roofline's longer side), not
  the host overhead between them, during which no warp is resident;
* **GPU util** (``DCGM_FI_DEV_GPU_UTIL``): the step's whole time (a kernel or the host
  launching one), as NVML counts it.

A prefill-heavy step is tensor-bound (tensor high, DRAM low); a decode-heavy one is
bandwidth-bound (DRAM high, tensor low).  :class:`BusyMeter` gives the busy seconds up to
``now`` (the step in flight counted only as far as it has run); :class:`BusyWindow` turns them
into DCGM's gauges: averages over a sampling window.  ``tp`` GPUs share each step evenly, so one
GPU's fractions are the step's.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from turbogate.perf import Deployment


class BusyTotals(NamedTuple):
    """Busy seconds since the engine started, per unit (each at most the time since then)."""

    at: float  # the engine time they are counted to
    gpu: float  # a step in progress (kernels or the host launching them)
    sm: float  # kernels running
    tensor: float  # tensor pipes at datasheet peak
    dram: float  # HBM at datasheet bandwidth


class BusyFractions(NamedTuple):
    """DCGM's gauges over a window: shares of time, 0..1."""

    gpu_util: float
    sm_active: float
    tensor_active: float
    dram_active: float


IDLE = BusyFractions(0.0, 0.0, 0.0, 0.0)


class BusyMeter:
    """Busy seconds of one engine's GPU, fed by :meth:`step` as each step is planned.

    A step's FLOPs, bytes and host overhead are linear in a few per-step sums (tokens, sequences,
    attention pairs, cached tokens), so a step only adds to those; seconds are worked out when
    read.  A simulator steps engines millions of times and reads them once a scrape."""

    __slots__ = ("_attn", "_attn_pairs", "_cached", "_dep", "_dram_per_byte", "_duration", "_kv_bytes", "_last",
                 "_moe_weights", "_overhead_per_seq", "_overhead_per_step", "_overhead_per_token", "_per_param",
                 "_seqs", "_steps", "_tensor_per_flop", "_tokens", "_weights")

    def __init__(self, dep: Deployment) -> None:
        self._dep = dep
        f = dep.factors
        self._tensor_per_flop = 1.0 / (dep.gpu.flops_for(dep.weight_dtype) * dep.tp)  # at datasheet peak
        self._dram_per_byte = 1.0 / (dep.gpu.hbm_bandwidth * dep.tp)  # at datasheet bandwidth
        self._per_param = 2.0 * dep.model.n_active_params
        self._attn = dep._attention_flops(1.0, 1.0)  # per (query, key) pair, as the step model counts it
        self._kv_bytes = float(dep.kv_bytes_per_token)
        # A dense model streams all its weights every step; a MoE one the experts its tokens touch.
        self._weights = 0.0 if dep.model.is_moe else float(dep._weights_read_bytes(1))
        # The step model's host time: per step, per sequence, and tensor parallelism's all-reduce
        # (a fixed part and a part per token; none at tp 1).
        ar0 = dep.allreduce_time(0)
        self._overhead_per_step = f.step_overhead_s + ar0
        self._overhead_per_seq = f.per_seq_overhead_s
        self._overhead_per_token = dep.allreduce_time(1) - ar0
        self._steps = 0
        self._duration = self._tokens = self._seqs = self._attn_pairs = self._cached = self._moe_weights = 0.0
        # The last step counted: start, duration and its parts of the sums (tokens, seqs, cached, pairs).
        self._last: tuple[float, float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    def step(self, start: float, duration: float, prefill_tokens: int, decode_seqs: int,
             decode_context_tokens: int, prefill_context_tokens: int = 0, prefill_seqs: int = 1) -> None:
        """Count a step planned at ``start`` lasting ``duration`` (``Deployment.step_time``'s
        arguments: the same FLOPs and bytes)."""
        n_prefill = (prefill_seqs if prefill_seqs > 1 else 1) if prefill_tokens else 0
        self._steps += 1
        self._duration += duration
        self._tokens += prefill_tokens + decode_seqs
        self._seqs += decode_seqs + n_prefill
        self._cached += decode_context_tokens + prefill_context_tokens
        # Attention pairs: each decode token over its context; causal prefill over half its chunk and
        # what was cached before it, per request.
        pairs = float(decode_context_tokens)
        if n_prefill:
            pairs += prefill_tokens * (prefill_tokens / 2.0 + prefill_context_tokens) / n_prefill
        self._attn_pairs += pairs
        if not self._weights:
            self._moe_weights += self._dep._weights_read_bytes(prefill_tokens + decode_seqs)
        self._last = (start, duration, prefill_tokens + decode_seqs, decode_seqs + n_prefill,
                      decode_context_tokens + prefill_context_tokens, pairs)

    def _busy(self, steps: float, duration: float, tokens: float, seqs: float, cached: float, pairs: float,
              weights: float) -> tuple[float, float, float, float]:
        """(gpu, sm, tensor, dram) busy seconds of steps with these sums."""
        tensor = (self._per_param * tokens + self._attn * pairs) * self._tensor_per_flop
        dram = (weights + self._kv_bytes * (cached + tokens)) * self._dram_per_byte
        overhead = self._overhead_per_step * steps + self._overhead_per_seq * seqs + self._overhead_per_token * tokens
        return duration, max(0.0, duration - overhead), tensor, dram

    def totals(self, now: float) -> BusyTotals:
        """Busy seconds up to ``now``: the step in flight counts only its part already run."""
        weights = self._moe_weights if not self._weights else self._weights * self._steps
        gpu, sm, tensor, dram = self._busy(self._steps, self._duration, self._tokens, self._seqs, self._cached,
                                           self._attn_pairs, weights)
        start, duration, tokens, seqs, cached, pairs = self._last
        ahead = start + duration - now
        if ahead > 0.0 and duration > 0.0:
            # The busy shares of the step in flight, taken off for the part still to run.
            step_weights = self._weights or self._dep._weights_read_bytes(int(tokens))
            g, s, t, d = self._busy(1, duration, tokens, seqs, cached, pairs, step_weights)
            left = min(1.0, ahead / duration)
            gpu, sm, tensor, dram = gpu - g * left, sm - s * left, tensor - t * left, dram - d * left
        return BusyTotals(now, gpu, sm, tensor, dram)


class BusyWindow:
    """DCGM's averaging: each reading is the share of time busy over at least the last
    ``window_s`` (since ``start``, while younger), however often it is read: scrapers sharing one
    window do not shorten each other's average."""

    __slots__ = ("_marks", "window_s")

    def __init__(self, window_s: float = 1.0, start: float = 0.0) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be > 0")
        self.window_s = window_s
        # The engine's start (everything idle) is the first mark: a first reading averages since then.
        self._marks: deque[BusyTotals] = deque([BusyTotals(start, 0.0, 0.0, 0.0, 0.0)])

    def read(self, totals: BusyTotals) -> BusyFractions:
        marks = self._marks
        now = totals.at
        marks.append(totals)
        # Keep the newest mark at least a window old as the start; older ones are not needed.
        while len(marks) > 2 and now - marks[1].at >= self.window_s:
            marks.popleft()
        first = marks[0]
        span = now - first.at
        if span <= 0.0:
            return IDLE
        return BusyFractions(_share(totals.gpu - first.gpu, span), _share(totals.sm - first.sm, span),
                             _share(totals.tensor - first.tensor, span), _share(totals.dram - first.dram, span))


def _share(busy: float, span: float) -> float:
    return min(1.0, max(0.0, busy / span))
