"""Fit the emulator's step-time constants to a bench run of a real engine (pure: records in, numbers out).

``turbogate emulate --calibrate-from RUN`` reads a bench run folder of a real engine (streamed, so every
request has its first-token time) and fits the decode step of a continuous-batching engine

    step time = step_s + per_seq_s × (sequences in the batch)

from the client's own timings.  Single inter-token gaps cannot be used: a real server writes several
tokens in one burst when it falls behind (vLLM on a busy CPU shows half its gaps at 0 ms), so each
request is taken whole: between its first and its last token the engine ran ``output − 1`` steps,
with on average ``batch`` sequences in them (the time-average, over that window, of how many requests
of the run were between their own first and last token).  The mean time per output token of the
requests at each (rounded) batch size (Σ time ÷ Σ steps: the token rate, and so the knee, follows the
mean step, slow steps of a busy machine included), and a line — its slope fitted to those means weighted
by their steps, and passing through the mean at the largest batch, where the engine runs saturated and
the knee is decided — give the two constants (neither negative).  The prompts prefilled meanwhile are inside those
times: the fit holds for the run's prompt length, so calibrate with the shape you will emulate.

They become the roofline's :class:`~turbogate.perf.PerfFactors` ``step_overhead_s`` and
``per_seq_overhead_s`` (:func:`factors_for`), with compute and memory at full efficiency, which for
the small models this is meant for — a CPU engine in CI, where host overheads dominate — leaves the
fitted costs to carry the step.  The step time is what decides the knee: batch ÷ step time is the
token rate.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from turbogate.errors import TurbogateError
from turbogate.perf import Deployment, PerfFactors
from turbogate.results.schema import RequestRecord, Sample

MIN_REQUESTS = 20  # usable requests a fit needs
MIN_PER_BIN = 5  # requests a batch size needs to be listed


class CalibrationError(TurbogateError):
    """The run cannot be fitted (not streamed, too few requests, no spread of batch sizes)."""


@dataclass(frozen=True, slots=True)
class StepFit:
    step_s: float  # fixed cost of one engine step
    per_seq_s: float  # added by each sequence decoding in it
    observations: int  # requests (or scrape intervals of the engine's counters) the fit used
    batch_sizes: tuple[int, ...]  # mean batch sizes seen, rounded (with MIN_PER_BIN requests or more)
    mean_step_s: tuple[float, ...]  # the mean step (time per output token) at each of them

    def step_time(self, decoding: int) -> float:
        return self.step_s + self.per_seq_s * decoding

    def to_dict(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "per_seq_s": self.per_seq_s,
                "observations": self.observations, "batch_sizes": list(self.batch_sizes),
                "mean_step_s": list(self.mean_step_s)}


def _windows(records: Iterable[RequestRecord]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(first token time, last token time, steps between them, prompt tokens) of each usable request."""
    first, last, steps, prompt = [], [], [], []
    for r in records:
        if not r.ok or r.sent_s is None or r.ttft_s is None or r.e2e_s is None or (r.output_tokens or 0) < 2:
            continue
        first.append(r.sent_s + r.ttft_s)
        last.append(r.sent_s + r.e2e_s)
        steps.append(float(r.output_tokens or 0) - 1.0)
        prompt.append(float(r.prompt_tokens or 0))
    return np.array(first), np.array(last), np.array(steps), np.array(prompt)


def fit_step_model(records: Iterable[RequestRecord]) -> StepFit:
    """The step model that best explains the run's per-request decode times (see the module docstring)."""
    first, last, steps, _prompt = _windows(records)
    if first.size == 0:
        raise CalibrationError("the run has no streamed request with 2 output tokens or more: run `turbogate "
                               "bench --stream` (the default) with fixed output lengths")
    if first.size < MIN_REQUESTS:
        raise CalibrationError(f"the run has {first.size} usable requests; a fit needs {MIN_REQUESTS} or more")
    span = last - first
    # Time-averaged batch over each request's window: Σ_j overlap(j, i) / |window i| (i itself included).
    overlap = np.clip(np.minimum(last[:, None], last[None, :]) - np.maximum(first[:, None], first[None, :]),
                      0.0, None)
    timed = span > 0  # a whole answer in one burst says nothing about the steps behind it
    batch = overlap.sum(axis=1)[timed] / span[timed]
    return _line_through_means(batch, span[timed], steps[timed], int(timed.sum()))


def _line_through_means(batch: np.ndarray, time_s: np.ndarray, steps: np.ndarray, used: int,
                        rate: np.ndarray | None = None) -> StepFit:
    """Mean step time per rounded batch size (Σ time ÷ Σ steps over the observations of that size, with
    MIN_PER_BIN of them) and the line step_s + per_seq_s × batch: its slope fitted to those means, weighted
    by each size's steps, and through the mean at the largest size; no constant negative.  Means, not
    medians: the token rate — the knee — is batch ÷ the mean step, a busy machine's slow steps included."""
    sizes = np.rint(batch).astype(int)
    seen, means, counts = [], [], []
    for n in np.unique(sizes):
        sel = sizes == n
        if n >= 1 and sel.sum() >= MIN_PER_BIN:
            seen.append(int(n))
            means.append(float(time_s[sel].sum() / steps[sel].sum()))
            counts.append(float(steps[sel].sum()))
    if not seen:
        raise CalibrationError(f"no batch size has {MIN_PER_BIN} timed observations: run a longer bench")
    if len(seen) == 1:
        return StepFit(means[0], 0.0, used, tuple(seen), tuple(means))  # one size seen: all the step's
    w = np.sqrt(np.array(counts))
    design = np.column_stack([np.ones(len(seen)), np.array(seen, dtype=float)])
    _, per_seq = _nonnegative_lstsq(design * w[:, None], np.array(means) * w)
    # The slope from all sizes; the line then goes through the largest batch seen: there the engine runs
    # saturated (and its server busiest, taking CPU from it), and there the knee is decided.
    top, top_mean = seen[-1], means[-1]
    if rate is not None:  # the engine's own token rate there (generated ÷ wall time): the capacity itself
        top_mean = top / float(rate[sizes == top].mean())
    step = top_mean - per_seq * top
    if step < 0.0:
        step, per_seq = 0.0, top_mean / top
    return StepFit(float(step), float(per_seq), used, tuple(seen), tuple(means))


def _nonnegative_lstsq(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient ≥ 0 (a negative cost is noise): drop the negative ones and refit."""
    active = np.ones(design.shape[1], dtype=bool)
    coef = np.zeros(design.shape[1])
    while active.any():
        sol, *_ = np.linalg.lstsq(design[:, active], target, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            return coef
        idx = np.flatnonzero(active)
        active[idx[np.argmin(sol)]] = False
    return coef


def factors_for(dep: Deployment, fit: StepFit) -> PerfFactors:
    """The roofline factors under which ``dep``'s decode step follows ``fit`` (see the module docstring)."""
    # Compute and memory at full efficiency: for the small models this is meant for they are then
    # negligible beside the fitted host costs, which carry the step.
    factors = PerfFactors(mfu=1.0, bw_efficiency=1.0, step_overhead_s=fit.step_s, per_seq_overhead_s=fit.per_seq_s,
                          activation_reserve_bytes=dep.factors.activation_reserve_bytes, tp_allreduce_s=0.0,
                          link_efficiency=dep.factors.link_efficiency)
    bare = replace(dep, factors=replace(factors, step_overhead_s=0.0, per_seq_overhead_s=0.0)).step_time(0, 1, 0)
    if bare > 0.1 * max(fit.step_time(1), 1e-9):
        raise CalibrationError(
            f"{dep.model.name} on {dep.gpu.name} takes {bare * 1000:.2f} ms a step to read its weights, more than a "
            f"tenth of the fitted step ({fit.step_time(1) * 1000:.2f} ms): emulate the engine's own model "
            "(--model PATH of its config.json)")
    return factors


# vLLM's own counters, when the bench scraped them (--scrape URL/metrics): sum and count of its inter-token
# latency, engine steps, generated tokens.  The engine's clock, not the client's: a bench that lags on a
# busy machine reads tokens late and in bursts, but these still time the steps.
_ITL_SUM, _ITL_COUNT = "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count"
_STEPS, _GENERATED = "vllm:iteration_tokens_total_count", "vllm:generation_tokens_total"
_ENGINE_COUNTERS = (_ITL_SUM, _ITL_COUNT, _STEPS, _GENERATED)
MIN_TOKENS_PER_INTERVAL = 20


def fit_from_engine_counters(samples: Iterable[Sample]) -> StepFit | None:
    """The step model from vLLM's scraped counters: per scrape interval, the inter-token latency (Δsum over
    Δcount tokens) at a mean batch of Δgenerated tokens ÷ Δsteps; then means per batch size and a line, as
    :func:`fit_step_model`, except that at the largest batch the line goes through the engine's measured
    token rate (Δgenerated ÷ Δt, the mean over those intervals): saturated, with a queue, the engine is never
    idle, and that rate — prefill steps, its server's share of the CPU and all — is its capacity, the knee.
    None when the run has not scraped them."""
    at: dict[tuple[str, float], dict[str, float]] = {}
    for smp in samples:
        if smp.name in _ENGINE_COUNTERS:
            row = at.setdefault((smp.source, smp.t), {})
            row[smp.name] = row.get(smp.name, 0.0) + smp.value
    rows = sorted((key, row) for key, row in at.items() if len(row) == len(_ENGINE_COUNTERS))
    batches, itl_sums, tokens, rates = [], [], [], []
    for ((src0, t0), r0), ((src1, t1), r1) in itertools.pairwise(rows):
        if src0 != src1:
            continue
        d = {name: r1[name] - r0[name] for name in _ENGINE_COUNTERS}
        if d[_ITL_COUNT] < MIN_TOKENS_PER_INTERVAL or d[_STEPS] <= 0:
            continue
        batches.append(d[_GENERATED] / d[_STEPS])
        itl_sums.append(d[_ITL_SUM])
        tokens.append(d[_ITL_COUNT])
        rates.append(d[_GENERATED] / (t1 - t0))
    if not batches:
        return None
    return _line_through_means(np.array(batches), np.array(itl_sums), np.array(tokens), len(batches),
                               rate=np.array(rates))


def fit_from_run(run_dir: Path | str) -> StepFit:
    """The step model of a bench run folder: from the engine's own counters where the bench scraped them
    (:func:`fit_from_engine_counters`), else from the client's request records (:func:`fit_step_model`)."""
    from turbogate.results.io import load_run

    run = load_run(run_dir)
    if run.summary.kind != "bench":
        raise CalibrationError(f"{run_dir} is a {run.summary.kind} run: calibrate from a bench run of a real engine")
    return fit_from_engine_counters(run.samples) or fit_step_model(run.requests)
