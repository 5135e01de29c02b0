"""Predicted TTFT / TPOT of one replica against request rate (pure, closed form).

The engine is the roofline step model of :mod:`turbogate.perf`; this module adds load.

**Batch and TPOT (a fixed point over the step model).**  At request rate ``λ`` below
saturation, Little's law on the decode phase gives the number of running sequences
``n = λ · O · s`` (each request stays ``O`` steps of length ``s``), and the step time grows
with the batch.  The step time is taken on the chord of the perf model between its two
exact end points — a lone sequence decoding (``s_idle``, batch → 0) and the saturation step
(``s_sat`` at the saturation batch ``c``, prefill of ``c·P/O`` tokens mixed in):

    s(n) = s_idle + n · δ,     δ = (s_sat − s_idle) / c

so the fixed point ``s = s(λ·O·s)`` has the closed form

    TPOT(λ) = s(λ) = s_idle / (1 − λ·O·δ)          (λ < μ; equals s_sat at λ = μ)

The roofline step time is convex in ``n`` (a maximum of linear terms), so the chord is an
upper bound between the end points: the prediction errs on the slow side.

**Queueing for a batch slot (M/D/c, Sakasegawa / Allen–Cunneen).**  The engine is ``c``
slots, each holding a request for ``O·s_sat`` seconds at saturation, so the replica serves at
most ``μ`` requests/s (:func:`turbogate.perf.saturation`).  With Poisson arrivals
(``ca² = 1``) and deterministic service (``cs² = 0``) the mean wait for a slot is

    W(λ) = ρ^√(2(c+1)) / (λ · (1 − ρ)) · (ca² + cs²) / 2,        ρ = λ / μ

(Sakasegawa 1977 for the M/M/c queue length, scaled by the Allen–Cunneen variability term).

**Priority (Turbo).**  With a share ``t`` of the load in a non-preemptive priority class,
Cobham's formula, written relative to the FIFO wait, gives

    W_turbo = W · (1 − ρ) / (1 − t·ρ),        W_standard = W / (1 − t·ρ)

(their load-weighted mean is ``W`` again: the conservation law).

**TTFT.**  A request waits ``W``, then for the running step to end (``s/2`` on average once
the engine is busy: ``min(1, n) · s / 2``), then its prefill.  The prompt is split in
``k = ⌈P / max_num_batched_tokens⌉`` chunks; each chunk is timed at the mean cached context
``(k−1)·chunk/2``.  Prefill alone takes ``TTFT_0``; sharing steps with a full batch it takes
``TTFT_full``; between them the chord again: ``TTFT_p(λ) = TTFT_0 + n/c · (TTFT_full − TTFT_0)``.
Both include the front end ``F`` (``Deployment.frontend_time``); while the ``n`` running requests stream
``n / s`` tokens/s through it, it is busy a share ``ρ_F`` (``PerfFactors.frontend_per_streamed_token_s``)
and a new request's front end takes ``F / (1 − ρ_F)``:

    TTFT(λ) = W(λ) + min(1, n) · s / 2 + TTFT_p(λ) + F · ρ_F / (1 − ρ_F)
    E2E(λ)  = TTFT(λ) + (O − 1) · TPOT(λ)

**The predicted knee**, the lowest rate at which this model's mean E2E latency reaches
``knee_factor`` × its unloaded value, is defined in plan/knee.py (``predicted_knee``) beside the
planner's other closed-form knee (docs/plan.md, "Which knee").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from turbogate.perf import Deployment, avg_kv_tokens_per_seq, saturation
from turbogate.perf.roofline import busy_frontend_wait


def sakasegawa_wait(rate: float, capacity: float, servers: int, ca2: float = 1.0, cs2: float = 0.0) -> float:
    """Mean queue wait (s) of a G/G/c queue by Sakasegawa's formula with the Allen–Cunneen term.

    ``rate``: arrivals/s; ``capacity``: the most the ``servers`` together complete per second.
    Returns ``inf`` at or above capacity and 0 at zero load.
    """
    if servers < 1:
        raise ValueError("servers must be >= 1")
    if capacity <= 0:
        raise ValueError("capacity must be > 0")
    if rate <= 0:
        return 0.0
    rho = rate / capacity
    if rho >= 1.0:
        return math.inf
    lq = float(rho ** math.sqrt(2.0 * (servers + 1))) / (1.0 - rho)
    return lq / rate * (ca2 + cs2) / 2.0


def priority_waits(rate: float, capacity: float, servers: int, turbo_share: float) -> tuple[float, float]:
    """(Turbo, Standard) mean waits when ``turbo_share`` of ``rate`` has non-preemptive priority.

    Cobham's formula relative to the FIFO wait ``W``: ``W_turbo = W·(1−ρ)/(1−tρ)``,
    ``W_standard = W/(1−tρ)``.  ``W·(1−ρ) = ρ^√(2(c+1)) / (2λ)`` stays finite at ρ = 1, so Turbo
    keeps a finite wait at saturation (its own load ``tρ`` below 1) while Standard's grows without
    bound; past saturation ``ρ`` is taken as 1 for that term (the excess is shed, not queued).
    """
    if not 0.0 <= turbo_share <= 1.0:
        raise ValueError("turbo_share must be in [0, 1]")
    if servers < 1 or capacity <= 0:
        raise ValueError("servers must be >= 1 and capacity > 0")
    if rate <= 0:
        return 0.0, 0.0
    rho = rate / capacity
    served = min(rate, capacity)
    base = float(min(rho, 1.0) ** math.sqrt(2.0 * (servers + 1))) / served / 2.0
    rho_t = turbo_share * rho
    turbo = base / (1.0 - rho_t) if rho_t < 1.0 else math.inf
    standard = base / ((1.0 - rho) * (1.0 - rho_t)) if rho < 1.0 and rho_t < 1.0 else math.inf
    return turbo, standard


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """Predicted behaviour of one replica at one request rate."""

    rate: float  # requests/s offered to the replica
    utilization: float  # rate / saturation rate
    batch: float  # mean running sequences
    tpot_s: float
    wait_s: float  # FIFO wait for a batch slot
    ttft_s: float
    e2e_s: float
    kv_utilization: float  # KV tokens in use / KV capacity
    saturated: bool

    def to_dict(self) -> dict[str, float | bool | None]:
        def f(x: float) -> float | None:
            return None if math.isinf(x) else x

        return {
            "rate": self.rate,
            "utilization": self.utilization,
            "batch": self.batch,
            "tpot_s": f(self.tpot_s),
            "wait_s": f(self.wait_s),
            "ttft_s": f(self.ttft_s),
            "e2e_s": f(self.e2e_s),
            "kv_utilization": self.kv_utilization,
            "saturated": self.saturated,
        }


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """The closed-form load model of one replica for one request shape (see the module doc)."""

    prompt_tokens: int
    output_tokens: int
    batch_cap: int  # c: concurrent sequences at saturation
    bound: str  # what caps c: "max_num_seqs" or "kv_cache"
    saturation_rate: float  # μ, requests/s
    s_idle: float  # decode step of a lone sequence
    s_sat: float  # step at saturation (prefill mixed in)
    ttft0: float  # prefill alone
    ttft_full: float  # prefill sharing steps with a full batch
    kv_tokens_per_seq: float  # mean KV footprint of a running sequence (whole blocks)
    kv_capacity_tokens: int
    ttft_steps: float = 0.0  # steps a first token waits beyond its prefill (PerfFactors.ttft_steps)
    busy_ttft_steps: float = 0.0  # more such steps while others run (PerfFactors.busy_ttft_steps)
    frontend_s: float = 0.0  # a request's front end alone (in ttft0 and ttft_full)
    frontend_per_streamed_token_s: float = 0.0  # front-end time per token the running requests stream

    @property
    def delta(self) -> float:
        return max(0.0, (self.s_sat - self.s_idle) / self.batch_cap)

    def tpot(self, rate: float) -> float:
        if rate >= self.saturation_rate:
            return self.s_sat
        return self.s_idle / (1.0 - max(rate, 0.0) * self.output_tokens * self.delta)

    def batch(self, rate: float) -> float:
        if rate >= self.saturation_rate:
            return float(self.batch_cap)
        return max(rate, 0.0) * self.output_tokens * self.tpot(rate)

    def wait(self, rate: float) -> float:
        return sakasegawa_wait(rate, self.saturation_rate, self.batch_cap)

    def ttft(self, rate: float, wait: float | None = None) -> float:
        w = self.wait(rate) if wait is None else wait
        n = self.batch(rate)
        s = self.tpot(rate)
        prefill = self.ttft0 + n / self.batch_cap * (self.ttft_full - self.ttft0)
        # The running requests (seen by an arrival as they are on average) each stream a token per step.
        busy = busy_frontend_wait(self.frontend_s, self.frontend_per_streamed_token_s, n / s if s > 0 else 0.0)
        return w + (min(1.0, n) * (0.5 + self.busy_ttft_steps) + self.ttft_steps) * s + prefill + busy

    def e2e(self, rate: float) -> float:
        return self.ttft(rate) + (self.output_tokens - 1) * self.tpot(rate)

    def kv_utilization(self, rate: float) -> float:
        if self.kv_capacity_tokens <= 0:
            return math.inf
        return self.batch(rate) * self.kv_tokens_per_seq / self.kv_capacity_tokens

    def point(self, rate: float) -> LoadPoint:
        return LoadPoint(
            rate=rate,
            utilization=rate / self.saturation_rate,
            batch=self.batch(rate),
            tpot_s=self.tpot(rate),
            wait_s=self.wait(rate),
            ttft_s=self.ttft(rate),
            e2e_s=self.e2e(rate),
            kv_utilization=self.kv_utilization(rate),
            saturated=rate >= self.saturation_rate,
        )

    def tier_ttft(self, rate: float, turbo_share: float) -> tuple[float, float]:
        """(Turbo, Standard) mean TTFT at ``rate`` when ``turbo_share`` of it has priority."""
        w_t, w_s = priority_waits(rate, self.saturation_rate, self.batch_cap, turbo_share)
        return self.ttft(rate, wait=w_t), self.ttft(rate, wait=w_s)


def prefill_chunks(prompt_tokens: int, max_num_batched_tokens: int) -> tuple[int, int, int]:
    """(chunks, tokens per chunk, mean cached context per chunk) of a chunked prefill."""
    chunks = max(1, -(-prompt_tokens // max_num_batched_tokens))
    chunk = -(-prompt_tokens // chunks)
    return chunks, chunk, (chunks - 1) * chunk // 2


def latency_model(
    dep: Deployment,
    prompt_tokens: int,
    output_tokens: int,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
) -> LatencyModel:
    """Build the load model of ``dep`` from the perf model's exact end points."""
    if max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
    sat = saturation(dep, prompt_tokens, output_tokens, max_num_seqs, max_num_batched_tokens)
    ctx_seq = prompt_tokens + output_tokens / 2.0
    s_idle = dep.decode_step_time(1, int(ctx_seq))
    chunks, chunk, cached = prefill_chunks(prompt_tokens, max_num_batched_tokens)
    # The front end (API server, tokenisation) delays the prefill whatever the load: it is in both ends.
    front = dep.frontend_time(prompt_tokens)
    ttft0 = front + chunks * dep.step_time(chunk, 0, 0, cached)
    ttft_full = front + chunks * dep.step_time(chunk, sat.batch, int(sat.batch * ctx_seq), cached)
    return LatencyModel(
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        batch_cap=sat.batch,
        bound=sat.bound,
        saturation_rate=sat.request_rate,
        s_idle=s_idle,
        s_sat=sat.step_time_s,
        ttft0=ttft0,
        ttft_full=ttft_full,
        kv_tokens_per_seq=avg_kv_tokens_per_seq(prompt_tokens, output_tokens, dep.block_size),
        kv_capacity_tokens=dep.kv_capacity_tokens,
        ttft_steps=dep.factors.ttft_steps,
        busy_ttft_steps=dep.factors.busy_ttft_steps,
        frontend_s=front,
        frontend_per_streamed_token_s=dep.factors.frontend_per_streamed_token_s,
    )
