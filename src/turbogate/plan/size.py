"""Size a fleet: which GPU, which TP, how many replicas meet per-tier p95 SLOs at a peak (pure).

One pipeline, two instruments (docs/plan.md, "Sizing a fleet"):

1. **The closed form prunes.**  For every candidate GPU × TP that holds the model, the load model
   of :mod:`turbogate.plan.latency` gives the fewest replicas that can possibly meet the SLOs:
   the per-replica load under saturation and each tier's *mean* TTFT (Cobham's priority split)
   under its p95 objective.  A p95 is at least its mean in these latency distributions, so the
   count is a lower bound, and its cost orders the candidates.
2. **The simulator confirms.**  A ``measure(candidate, replicas)`` callable (the gateway's own
   core in virtual time: :mod:`turbogate.plan.size_sim`) gives each tier's p95.  From the lower
   bound the search walks to the smallest count that meets every SLO while one replica fewer
   misses one, both simulated, so each recommendation comes with its own evidence.  Candidates
   are confirmed cheapest lower bound first.  The walk of a candidate starts at its bound times
   the smallest ratio (simulated ÷ bound) of the candidates confirmed before it, never below the
   bound: the simulator's tail is wider than the closed form's means by much the same factor
   across GPUs, so the walk usually takes two to four runs.  Once ``top`` fleets are confirmed,
   a candidate whose start costs at least the ``top``-th of them is not simulated.

Nothing here runs a simulation or reads a file: ``measure`` is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field
from typing import Any, Literal

from turbogate.plan.latency import LatencyModel

TIERS: tuple[str, ...] = ("turbo", "standard")
#: The most simulations one candidate may take before it is reported as not confirmed.
MAX_SIMS_PER_CANDIDATE = 10
#: The walk up stops at this many times its start (plus 4): a fleet that misses there misses for a
#: reason more replicas do not fix (a tenant's limit, a tail the engine itself makes).
MAX_GROWTH = 4


@dataclass(frozen=True, slots=True)
class TierSLO:
    """A tier's objectives, judged on the tier's requests (those that asked for it)."""

    ttft_p95_s: float
    itl_p95_s: float | None = None  # judged on each request's mean inter-token time (TPOT)

    def __post_init__(self) -> None:
        for name, v in (("TTFT p95", self.ttft_p95_s), ("ITL p95", self.itl_p95_s)):
            if v is not None and (not math.isfinite(v) or v <= 0):
                raise ValueError(f"{name} SLO must be a number of seconds > 0, got {v}")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One GPU × TP that holds the model, with its closed-form load model."""

    gpu: str
    tp: int
    price_per_gpu_hour: float
    model: LatencyModel
    knee_rps: float  # per replica, closed form (mean E2E reaches knee_factor × unloaded)

    def cost_per_hour(self, replicas: int) -> float:
        return replicas * self.tp * self.price_per_gpu_hour


@dataclass(frozen=True, slots=True)
class Measured:
    """What the simulator gave for one fleet: per tier, p95 TTFT and TPOT (None: unknown or unserved)."""

    ttft_p95_s: Mapping[str, float | None]
    tpot_p95_s: Mapping[str, float | None]
    failed_share: Mapping[str, float]  # shed or failed / the tier's requests
    requests: Mapping[str, int]
    late_ttft_p95_s: Mapping[str, float | None]  # the second half of the window: a growing queue shows there
    wall_s: float = 0.0

    def misses(self, slos: Mapping[str, TierSLO]) -> list[str]:
        """Each objective missed, as ``tier TTFT p95 X s > Y s`` (empty: every SLO met)."""
        out: list[str] = []
        for tier, slo in slos.items():
            if not self.requests.get(tier):
                continue
            for what, got in (("TTFT p95", self.ttft_p95_s.get(tier)),
                              ("TTFT p95 of the window's second half", self.late_ttft_p95_s.get(tier))):
                if got is None or got > slo.ttft_p95_s:
                    out.append(f"{tier} {what} {_s(got)} > {slo.ttft_p95_s:g} s")
            if slo.itl_p95_s is not None:
                got = self.tpot_p95_s.get(tier)
                if got is None or got > slo.itl_p95_s:
                    out.append(f"{tier} ITL (TPOT) p95 {_s(got)} > {slo.itl_p95_s:g} s")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_p95_s": dict(self.ttft_p95_s), "tpot_p95_s": dict(self.tpot_p95_s),
                "second_half_ttft_p95_s": dict(self.late_ttft_p95_s), "failed_share": dict(self.failed_share),
                "requests": dict(self.requests), "wall_s": self.wall_s}


def _s(x: float | None) -> str:
    return "unserved" if x is None else f"{x:.3f} s"


Measure = Callable[[Candidate, int], Measured]


@dataclass(frozen=True, slots=True)
class SizeInputs:
    peak_rps: float
    turbo_share: float
    slos: Mapping[str, TierSLO]  # tier → objectives; tiers without traffic are ignored
    top: int = 3

    def __post_init__(self) -> None:
        if not math.isfinite(self.peak_rps) or self.peak_rps <= 0:
            raise ValueError(f"--peak-rps must be a number > 0, got {self.peak_rps}")
        if not 0.0 <= self.turbo_share <= 1.0:
            raise ValueError(f"--turbo-share must be in [0, 1], got {self.turbo_share}")
        if self.top < 1:
            raise ValueError("--top must be >= 1")
        unknown = set(self.slos) - set(TIERS)
        if unknown:
            raise ValueError(f"SLOs for unknown tiers {sorted(unknown)}; tiers: {', '.join(TIERS)}")
        if not any(self.tier_share(t) > 0 for t in self.slos):
            raise ValueError("give a TTFT p95 SLO for a tier that has traffic (--turbo-share sets the split)")

    def tier_share(self, tier: str) -> float:
        return self.turbo_share if tier == "turbo" else 1.0 - self.turbo_share

    @property
    def active_slos(self) -> dict[str, TierSLO]:
        return {t: s for t, s in self.slos.items() if self.tier_share(t) > 0}


def closed_form_replicas(c: Candidate, inputs: SizeInputs) -> int | None:
    """Fewest replicas whose per-replica load is under saturation and each tier's mean TTFT (and
    TPOT) under its p95 SLO; None when no count can (a tier's unloaded TTFT is over its SLO)."""
    lm = c.model
    slos = inputs.active_slos
    for slo in slos.values():
        if lm.ttft(0.0) > slo.ttft_p95_s or (slo.itl_p95_s is not None and lm.tpot(0.0) > slo.itl_p95_s):
            return None
    n = max(1, math.floor(inputs.peak_rps / lm.saturation_rate) + 1)
    while True:
        x = inputs.peak_rps / n
        if x < lm.saturation_rate and _means_meet(lm, x, inputs.turbo_share, slos):
            return n
        n += 1


def _means_meet(lm: LatencyModel, x: float, turbo_share: float, slos: Mapping[str, TierSLO]) -> bool:
    turbo, standard = lm.tier_ttft(x, turbo_share)
    means = {"turbo": turbo, "standard": standard}
    return all(means[t] <= s.ttft_p95_s and (s.itl_p95_s is None or lm.tpot(x) <= s.itl_p95_s)
               for t, s in slos.items())


@dataclass(frozen=True, slots=True)
class Fleet:
    """A confirmed fleet: the smallest count of its kind the simulator found meeting every SLO."""

    candidate: Candidate
    replicas: int
    measured: Measured
    smaller: Measured | None  # one replica fewer (None: one replica is the least)
    smaller_misses: tuple[str, ...]
    closed_form_replicas: int
    peak_rps: float
    turbo_share: float

    @property
    def gpus(self) -> int:
        return self.replicas * self.candidate.tp

    @property
    def cost_per_hour(self) -> float:
        return self.candidate.cost_per_hour(self.replicas)

    @property
    def knee_headroom(self) -> float:
        """How far the peak may grow before the fleet's closed-form knee (negative: past it)."""
        return self.replicas * self.candidate.knee_rps / self.peak_rps - 1.0

    @property
    def saturation_headroom(self) -> float:
        return self.replicas * self.candidate.model.saturation_rate / self.peak_rps - 1.0

    def closed_form_mean_ttft(self) -> dict[str, float]:
        turbo, standard = self.candidate.model.tier_ttft(self.peak_rps / self.replicas, self.turbo_share)
        return {"turbo": turbo, "standard": standard}

    def to_dict(self) -> dict[str, Any]:
        c = self.candidate
        return {
            "gpu": c.gpu, "tp": c.tp, "replicas": self.replicas, "gpus": self.gpus,
            "cost_per_hour": self.cost_per_hour, "price_per_gpu_hour": c.price_per_gpu_hour,
            "simulated": self.measured.to_dict(),
            "one_fewer": None if self.smaller is None else {"replicas": self.replicas - 1,
                                                             "simulated": self.smaller.to_dict(),
                                                             "misses": list(self.smaller_misses)},
            "closed_form": {"replicas_lower_bound": self.closed_form_replicas,
                            "mean_ttft_s": self.closed_form_mean_ttft(),
                            "knee_rps_per_replica": c.knee_rps,
                            "saturation_rps_per_replica": c.model.saturation_rate,
                            "fleet_knee_rps": self.replicas * c.knee_rps,
                            "knee_headroom": self.knee_headroom, "saturation_headroom": self.saturation_headroom},
        }


#: Why a candidate is not ranked: over an SLO even unloaded; cheaper fleets were confirmed before its
#: bound; or the simulations allowed did not confirm it.
SkipKind = Literal["over_slo_unloaded", "pruned", "not_confirmed"]


@dataclass(frozen=True, slots=True)
class Skipped:
    gpu: str
    tp: int
    kind: SkipKind
    reason: str
    cost_lower_bound: float | None = None
    replicas_lower_bound: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "tp": self.tp, "kind": self.kind, "reason": self.reason,
                "cost_per_hour_lower_bound": self.cost_lower_bound, "replicas_lower_bound": self.replicas_lower_bound}


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True, slots=True)
class SizeResult:
    fleets: tuple[Fleet, ...]  # confirmed, cheapest first
    skipped: tuple[Skipped, ...]  # pruned by the closed form, or not confirmed
    simulations: int

    def to_dict(self) -> dict[str, Any]:
        return {"fleets": [f.to_dict() for f in self.fleets], "skipped": [s.to_dict() for s in self.skipped],
                "simulations": self.simulations}


@dataclass
class _Search:
    """The simulated runs of one candidate, by replica count (each count simulated once)."""

    candidate: Candidate
    measure: Measure
    slos: Mapping[str, TierSLO]
    runs: dict[int, Measured] = field(default_factory=dict)

    def meets(self, n: int) -> bool:
        if n not in self.runs:
            self.runs[n] = self.measure(self.candidate, n)
        return not self.runs[n].misses(self.slos)

    def smallest(self, start: int) -> int | None:
        """The smallest count meeting every SLO with one fewer missing, searched from ``start``."""
        if self.meets(start):
            n = start
            while n > 1 and len(self.runs) < MAX_SIMS_PER_CANDIDATE and self.meets(n - 1):
                n -= 1
            return n if n == 1 or (n - 1 in self.runs and not self.meets(n - 1)) else None
        lo, step = start, 1  # lo misses; gallop up, then halve the bracket
        limit = MAX_GROWTH * start + 4
        while len(self.runs) < MAX_SIMS_PER_CANDIDATE and lo < limit:
            hi = min(lo + step, limit)
            if self.meets(hi):
                while hi - lo > 1 and len(self.runs) < MAX_SIMS_PER_CANDIDATE:
                    mid = (lo + hi) // 2
                    lo, hi = (lo, mid) if self.meets(mid) else (mid, hi)
                return hi if hi - lo == 1 else None
            lo, step = hi, step * 2
        return None


def search(c: Candidate, start: int, measure: Measure, slos: Mapping[str, TierSLO]) -> tuple[int | None,
                                                                                         dict[int, Measured]]:
    """One candidate's walk from ``start``: the smallest count confirmed (None: not within the budget) and
    every run it took.  A module-level function, so a process pool can run it."""
    walk = _Search(c, measure, slos)
    return walk.smallest(start), walk.runs


def size(candidates: Sequence[Candidate], inputs: SizeInputs, measure: Measure,
         on_candidate: Callable[[Candidate, int], None] | None = None,
         on_searched: Callable[[Candidate, dict[int, Measured]], None] | None = None,
         executor: Executor | None = None, jobs: int = 1) -> SizeResult:
    """Rank fleets for ``inputs``: prune with the closed form, confirm with ``measure`` (module doc).

    With an ``executor``, up to ``jobs`` candidates are searched at once (``measure`` must then be
    picklable); each is pruned, and its walk started, from what was confirmed when it was sent."""
    skipped: list[Skipped] = []
    bounded: list[tuple[float, int, Candidate]] = []
    for c in candidates:
        n = closed_form_replicas(c, inputs)
        if n is None:
            skipped.append(Skipped(c.gpu, c.tp, "over_slo_unloaded", f"unloaded TTFT {c.model.ttft(0.0):.3f} s / TPOT "
                                   f"{c.model.tpot(0.0):.4f} s (closed form): already over an SLO"))
        else:
            bounded.append((c.cost_per_hour(n), n, c))
    bounded.sort(key=lambda b: (b[0], b[2].tp, b[2].gpu))
    fleets: list[Fleet] = []
    sims = 0
    ratio = math.inf  # the smallest simulated ÷ closed-form count so far
    slos = inputs.active_slos

    def settle(cost: float, n: int, c: Candidate, best: int | None, runs: dict[int, Measured]) -> None:
        nonlocal sims, ratio
        sims += len(runs)
        if on_searched is not None:
            on_searched(c, runs)
        if best is None:
            skipped.append(Skipped(c.gpu, c.tp, "not_confirmed", f"not confirmed in {len(runs)} simulations (tried "
                                   f"{', '.join(map(str, sorted(runs)))} replicas)", cost, n))
            return
        ratio = min(ratio, best / n)
        smaller = runs.get(best - 1)
        fleets.append(Fleet(c, best, runs[best], smaller, tuple(smaller.misses(slos)) if smaller is not None else (),
                            n, inputs.peak_rps, inputs.turbo_share))

    queue = list(reversed(bounded))  # cheapest bound last: pop() takes it
    pending: dict[Future[tuple[int | None, dict[int, Measured]]], tuple[float, int, Candidate]] = {}
    while queue or pending:
        while queue and len(pending) < max(1, jobs):
            cost, n, c = queue.pop()
            start = n if math.isinf(ratio) else max(n, math.floor(n * ratio))
            confirmed = sorted(f.cost_per_hour for f in fleets)
            if len(confirmed) >= inputs.top and c.cost_per_hour(start) >= confirmed[inputs.top - 1]:
                why = "its closed-form lower bound" if start == n else (
                    f"its closed-form lower bound × {ratio:.2f} (the least the simulator has needed over the bound)")
                skipped.append(Skipped(c.gpu, c.tp, "pruned", f"pruned: {why} costs at least the "
                                       f"{ordinal(inputs.top)} confirmed fleet", c.cost_per_hour(start), start))
                continue
            if on_candidate is not None:
                on_candidate(c, n)
            if executor is None:
                settle(cost, n, c, *search(c, start, measure, slos))
            else:
                pending[executor.submit(search, c, start, measure, slos)] = (cost, n, c)
        if pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f][0]):
                settle(*pending.pop(fut), *fut.result())
    fleets.sort(key=lambda f: (f.cost_per_hour, f.gpus, f.candidate.gpu))
    return SizeResult(tuple(fleets), tuple(skipped), sims)
