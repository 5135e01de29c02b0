"""A pool's knees in closed form, from its hardware, model and request shape (pure).

Two of the project's four named knees (docs/bench.md, "Four knees") are defined here:

- :func:`predicted_knee`, the **predicted knee** of one replica: the lowest rate at which the
  latency model's (plan/latency.py) mean E2E reaches ``knee_factor`` × its unloaded value, found
  by bisection (:data:`KNEE_ITERATIONS` halvings of ``[0, μ]``; the workbook does the same halvings
  with cell formulas).  It always lies below ``μ`` because the queueing wait grows without bound
  there.  It is the latency knee of means; the *measured* knee replaces it where ``--from-run`` is
  given.  :func:`planned_knee` is a pool's: ``replicas`` × one replica's, since the gateway spreads
  the load; a pool's ``knee_from: plan`` gives it to the knee guard.
- :func:`plateau_knee`, the **plateau knee**: the closed form of the *measured* knee
  (results/knee.py, throughput method), what the pool completes while saturated.  ``sim`` and
  ``bench`` measure that one; the third, the **online knee**, is learnt live (sched/knee_online.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from turbogate.perf import Deployment, deployment, get_gpu, resolve_model, saturation
from turbogate.perf.default_workload import OUTPUT_TOKENS, PROMPT_TOKENS
from turbogate.plan.latency import LatencyModel, latency_model
from turbogate.results.fmt import fmt_num

KNEE_ITERATIONS = 48
DEFAULT_KNEE_FACTOR = 2.0


def predicted_knee(model: LatencyModel, knee_factor: float = DEFAULT_KNEE_FACTOR) -> float:
    """The predicted knee of one replica: the lowest rate where ``model``'s mean E2E latency reaches
    ``knee_factor`` × its unloaded E2E (bisection; see the module's docstring)."""
    if knee_factor <= 1.0:
        raise ValueError("knee_factor must be > 1")
    target = knee_factor * model.e2e(0.0)
    lo, hi = 0.0, model.saturation_rate
    for _ in range(KNEE_ITERATIONS):
        mid = (lo + hi) / 2.0
        if model.e2e(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True, slots=True)
class PlannedPool:
    """A pool's hardware, model and request shape, as ``plan capacity`` takes them."""

    gpu: str
    model: str
    replicas: int
    tp: int = 1
    dtype: str = "bf16"
    kv_dtype: str = "auto"
    gpu_mem_util: float = 0.9
    prompt_tokens: int = PROMPT_TOKENS
    output_tokens: int = OUTPUT_TOKENS
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    knee_factor: float = DEFAULT_KNEE_FACTOR

    def deployment(self) -> Deployment:
        return deployment(get_gpu(self.gpu), resolve_model(self.model), tp=self.tp, weight_dtype=self.dtype,
                          kv_dtype=self.kv_dtype, gpu_mem_util=self.gpu_mem_util)


def planned_knee(p: PlannedPool) -> tuple[float, str]:
    """The pool's predicted knee (req/s, all replicas) and a line saying what it was computed for.
    ``ValueError`` / ``LookupError`` name an unknown GPU or model or a bad setting."""
    if p.replicas < 1:
        raise ValueError("replicas must be >= 1")
    dep = p.deployment()
    lm = latency_model(dep, p.prompt_tokens, p.output_tokens, p.max_num_seqs, p.max_num_batched_tokens)
    per_replica = predicted_knee(lm, p.knee_factor)
    detail = (f"plan: {p.replicas} × {p.gpu} {p.model} tp{p.tp}, {p.prompt_tokens}/{p.output_tokens} tokens, "
              f"max_num_seqs {p.max_num_seqs}: {fmt_num(per_replica)} req/s per replica "
              f"(E2E {p.knee_factor:g}× unloaded)")
    return per_replica * p.replicas, detail


def plateau_knee(p: PlannedPool, capacity_share: float = 1.0) -> float:
    """The pool's plateau knee: the closed form of the knee ``bench`` and ``sim`` measure (results/knee.py,
    throughput method), what the pool completes while saturated, req/s.

    The gateway lets one tier hold at most ⌊``capacity_share`` × slots⌋ of the pool's slots (sched/admission.py;
    Standard's share is 0.9), spread over the replicas, so a saturated engine runs c of its ``max_num_seqs``.
    With one request length the batch runs in cohorts: requests admitted together finish together and their
    replacements prefill together (c × prompt tokens, in chunks of ``max_num_batched_tokens``), then decode
    O − 1 steps of c sequences.  ``perf.saturation`` spreads the prefills evenly over the steps instead, which a
    roofline's compute-bound prefill makes up to 15 % optimistic against the stepped engine the emulator and
    the simulator run; the cohort errs the other way, by a few per cent.  With Turbo asked for, the holdback
    (``max_utilization``) and Turbo's dynamic headroom lower the plateau further; they are not modelled, and
    there the simulator's plateau is the one to trust (docs/bench.md, "Three instruments, one knee")."""
    if not 0.0 < capacity_share <= 1.0:
        raise ValueError("capacity_share must be in (0, 1]")
    dep = p.deployment()
    sat = saturation(dep, p.prompt_tokens, p.output_tokens, p.max_num_seqs, p.max_num_batched_tokens)
    held = max(p.replicas, math.floor(capacity_share * p.replicas * p.max_num_seqs + 1e-9))
    base, extra = divmod(held, p.replicas)  # ``extra`` replicas run one sequence more

    def rate(c: int) -> float:
        c = max(1, min(sat.batch, c))
        prefill_tokens = c * p.prompt_tokens
        budget = p.max_num_batched_tokens
        prefill_s = sum(dep.step_time(min(budget, prefill_tokens - k), 0, 0, 0)
                        for k in range(0, prefill_tokens, budget))
        decode_s = dep.step_time(0, c, int(c * (p.prompt_tokens + p.output_tokens / 2)), 0)
        return c / (prefill_s + (p.output_tokens - 1) * decode_s)

    return (p.replicas - extra) * rate(base) + extra * rate(base + 1)
