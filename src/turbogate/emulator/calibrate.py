"""Fit the emulator's step-time constants to a bench run of a real engine (pure: records in, numbers out).

``turbogate emulate --calibrate-from RUN`` reads a bench run folder of a real engine (streamed, so every
request has its inter-token gaps) and fits the linear step model of a continuous-batching engine

    step time = step_s + per_seq_s × (sequences decoding) + per_prefill_token_s × (prompt tokens prefilled)

from the client's own timings: every gap between two streamed tokens of a request is one engine step,
the sequences decoding during it are counted from all requests' first and last token times, and the
prompt tokens prefilled in it are those of the requests whose first token closed it.  The fit is
robust to the client's hiccups: it takes the median gap per batch size (gaps with no prefill in them)
and fits the line through those medians weighted by their counts, then the prefill cost from the median
excess of the gaps that carried a prefill.

The three constants map onto the roofline's :class:`~turbogate.perf.PerfFactors` of the emulated
deployment (:func:`factors_for`): ``step_overhead_s`` = step_s; the compute efficiency ``mfu`` such
that one token's compute costs per_prefill_token_s; ``per_seq_overhead_s`` = per_seq_s less that
compute share.  This suits an engine whose step time is not set by HBM bandwidth — a small model, or
a CPU engine, where host overheads and compute per token dominate — which is what the real engines
in CI are.  The step time is what decides the knee: batch size × 1/step time is the token rate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from turbogate.errors import TurbogateError
from turbogate.perf import Deployment, PerfFactors
from turbogate.results.schema import RequestRecord

MIN_GAPS = 50  # gaps a fit needs in all
MIN_PER_BIN = 5  # gaps a batch size needs to count


class CalibrationError(TurbogateError):
    """The run cannot be fitted (not streamed, too few requests, no spread of batch sizes)."""


@dataclass(frozen=True, slots=True)
class StepFit:
    step_s: float  # fixed cost of one engine step
    per_seq_s: float  # added by each sequence decoding in it
    per_prefill_token_s: float  # added by each prompt token prefilled in it
    gaps: int  # inter-token gaps used
    batch_sizes: tuple[int, ...]  # batch sizes seen (with MIN_PER_BIN gaps or more)
    median_gap_s: tuple[float, ...]  # the median gap at each of them

    def step_time(self, decoding: int, prefill_tokens: int = 0) -> float:
        return self.step_s + self.per_seq_s * decoding + self.per_prefill_token_s * prefill_tokens

    def to_dict(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "per_seq_s": self.per_seq_s, "per_prefill_token_s": self.per_prefill_token_s,
                "gaps": self.gaps, "batch_sizes": list(self.batch_sizes), "median_gap_s": list(self.median_gap_s)}


def _token_times(records: Iterable[RequestRecord]) -> list[tuple[np.ndarray, int]]:
    out: list[tuple[np.ndarray, int]] = []
    for r in records:
        if not r.ok or r.sent_s is None or r.ttft_s is None or not r.itl_s:
            continue
        first = r.sent_s + r.ttft_s
        times = first + np.concatenate(([0.0], np.cumsum(np.asarray(r.itl_s, dtype=float))))
        out.append((times, int(r.prompt_tokens or 0)))
    return out


def fit_step_model(records: Iterable[RequestRecord]) -> StepFit:
    """The step model that best explains the run's inter-token gaps (see the module docstring)."""
    streams = _token_times(records)
    if not streams:
        raise CalibrationError("the run has no streamed request with inter-token gaps: run the bench with --stream "
                               "(the default) and output of 2 tokens or more")
    starts = np.sort(np.array([t[0] for t, _ in streams]))
    ends = np.sort(np.array([t[-1] for t, _ in streams]))
    order = np.argsort([t[0] for t, _ in streams])
    first_sorted = np.array([streams[i][0][0] for i in order])
    prompt_cum = np.concatenate(([0.0], np.cumsum([streams[i][1] for i in order], dtype=float)))
    gap_list, mid_list, lo_list, hi_list = [], [], [], []
    for times, _ in streams:
        gap_list.append(np.diff(times))
        mid_list.append((times[:-1] + times[1:]) / 2.0)
        lo_list.append(times[:-1])
        hi_list.append(times[1:])
    gaps = np.concatenate(gap_list)
    mids = np.concatenate(mid_list)
    lo, hi = np.concatenate(lo_list), np.concatenate(hi_list)
    if gaps.size < MIN_GAPS:
        raise CalibrationError(f"the run has {gaps.size} inter-token gaps; a fit needs {MIN_GAPS} or more")
    # Sequences decoding at the gap's middle: started (first token) and not yet finished (last token).
    decoding = np.searchsorted(starts, mids, side="right") - np.searchsorted(ends, mids, side="left")
    # Prompt tokens prefilled in the step the gap spans: those of requests whose first token ended it.
    first_hi = np.searchsorted(first_sorted, hi, side="right")
    first_lo = np.searchsorted(first_sorted, lo, side="right")
    prefill = prompt_cum[first_hi] - prompt_cum[first_lo]
    prefilled = first_hi - first_lo  # requests whose prefill step it was: each also costs per_seq_s
    plain = prefill == 0
    sizes, medians, weights = [], [], []
    for n in np.unique(decoding[plain]):
        sel = gaps[plain & (decoding == n)]
        if n >= 1 and sel.size >= MIN_PER_BIN:
            sizes.append(int(n))
            medians.append(float(np.median(sel)))
            weights.append(float(sel.size))
    if not sizes:
        raise CalibrationError("no batch size has enough gaps without a prefill in them")
    if len(sizes) == 1:
        step_s, per_seq_s = medians[0], 0.0  # one batch size: all of it is the step's
    else:
        w = np.sqrt(np.array(weights))
        design = np.column_stack([np.ones(len(sizes)), np.array(sizes, dtype=float)])
        (step_s, per_seq_s), *_ = np.linalg.lstsq(design * w[:, None], np.array(medians) * w, rcond=None)
        if per_seq_s < 0.0:  # noise on a flat curve: a constant step
            step_s, per_seq_s = float(np.average(medians, weights=weights)), 0.0
        elif step_s < 0.0:  # a line through the origin
            step_s = 0.0
            per_seq_s = float(np.dot(weights, np.array(medians) * sizes) / np.dot(weights, np.square(sizes)))
    with_prefill = ~plain & (decoding >= 1)
    per_token = 0.0
    if with_prefill.sum() >= MIN_PER_BIN:
        excess = gaps[with_prefill] - (step_s + per_seq_s * (decoding[with_prefill] + prefilled[with_prefill]))
        per_token = max(0.0, float(np.median(excess / prefill[with_prefill])))
    return StepFit(float(step_s), float(per_seq_s), per_token, int(gaps.size), tuple(sizes), tuple(medians))


def factors_for(dep: Deployment, fit: StepFit) -> PerfFactors:
    """The roofline factors under which ``dep``'s step time follows ``fit`` (see the module docstring)."""
    peak = dep.gpu.flops_for(dep.weight_dtype) * dep.tp
    flops_per_token = 2.0 * dep.model.n_active_params
    per_token = fit.per_prefill_token_s
    mfu = min(1.0, flops_per_token / (peak * per_token)) if per_token > 0.0 else 1.0
    compute_per_token = flops_per_token / (peak * mfu)
    # The roofline takes the larger of compute and memory time: the fit holds only while reading the
    # weights stays well under the fitted step (a large catalog model on its GPU would not be).
    memory_s = replace(dep, factors=PerfFactors(mfu=mfu, bw_efficiency=1.0, step_overhead_s=0.0,
                                                 per_seq_overhead_s=0.0, tp_allreduce_s=0.0)).step_time(0, 1, 0)
    if memory_s > 0.1 * max(fit.step_s + fit.per_seq_s, 1e-9):
        raise CalibrationError(
            f"{dep.model.name} on {dep.gpu.name} reads its weights in {memory_s * 1000:.2f} ms a step, more than a "
            f"tenth of the fitted step ({(fit.step_s + fit.per_seq_s) * 1000:.2f} ms): emulate the engine's own "
            "model (--model PATH of its config.json)")
    return PerfFactors(mfu=mfu, bw_efficiency=1.0, step_overhead_s=fit.step_s,
                       per_seq_overhead_s=max(0.0, fit.per_seq_s - compute_per_token),
                       activation_reserve_bytes=dep.factors.activation_reserve_bytes,
                       tp_allreduce_s=0.0, link_efficiency=dep.factors.link_efficiency)


def fit_from_run(run_dir: Path | str) -> StepFit:
    """:func:`fit_step_model` over the request records of a bench run folder."""
    from turbogate.results.io import load_run

    run = load_run(run_dir, with_samples=False)
    if run.summary.kind != "bench":
        raise CalibrationError(f"{run_dir} is a {run.summary.kind} run: calibrate from a bench run of a real engine")
    return fit_step_model(run.requests)
