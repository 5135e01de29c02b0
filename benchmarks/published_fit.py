"""The published cells of ``perf/data/published_cells.yaml`` against the model, by half, and the search
that fitted each engine profile on its fitting half.  Used by engine_calibration.py."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

from turbogate.perf.cells import PublishedCell, published_cells, published_sources
from turbogate.perf.profiles import EngineProfile, get_profile
from turbogate.plan.fidelity import Prediction, closed_form, engine

OPTIMISM_LIMIT = 0.20  # no latency cell may be predicted shorter than published by more than this
OPTIMISM_MARGIN = 0.15  # the fit's loss prices latency optimism beyond this, to keep clear of the limit

# The factors each profile's search moves, and the values it tries (coordinate descent, closed form).
SEARCH: dict[str, tuple[float | None, ...]] = {
    "frontend_s": (0.0, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1),
    "bw_scale": (0.7, 0.75, 0.8, 0.85, 0.875, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15),
    "mfu_scale": (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3),
    "tp_allreduce_s": (0.0, 0.000006, 0.000012, 0.000018, 0.000025, 0.00003, 0.00004, 0.00005, 0.00006, 0.00008,
                       0.0001, 0.00012, 0.00014),
    "tp_allreduce_growth_s": (0.0, 0.000006, 0.000013, 0.00002, 0.00003, 0.00004),
    "ridge_exponent": (0.0, 2.0, 3.0, 4.0, 6.0),
    "frontend_per_token_s": (0.0, 0.000002, 0.000005, 0.00001, 0.000015, 0.00002, 0.00003, 0.00004, 0.00005),
    "decode_allreduce_s": (None, 0.000005, 0.00001, 0.000015, 0.00002, 0.000025, 0.00003,
                           0.00004, 0.00005, 0.00006),  # None: the prefill's
    # A Python front end's cost per token it streams (detokenise, send an event): tens of µs to a millisecond.
    "frontend_per_streamed_token_s": (0.0, 0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075,
                                      0.001),
}
EXTRA_SEARCH: dict[str, dict[str, tuple[float | None, ...]]] = {
    "sglang": {"kv_bw_efficiency": (0.125, 0.2, 0.3, 0.5, 0.7)},
    # The fitting half's TensorRT-LLM TTFTs all have 5,000-token prompts: they fix the front end's total
    # there, not its split.  The fixed part is set to vLLM's API server's (5 ms), the rest fitted per token.
    # TensorRT-LLM runs its own custom all-reduce in prefill and decode alike: one latency, not two.
    # NIM's table (5 shapes x 1-250 clients) shows two costs the other engines' cells do not: a first token
    # waits several decode steps once others run, and every running request adds host time to a step.
    "trtllm": {"frontend_s": (0.005,), "decode_allreduce_s": (),
               "busy_ttft_steps": (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0),
               "per_seq_overhead_s": (0.000004, 0.00001, 0.00002, 0.00003, 0.00004, 0.00005, 0.00006, 0.00008),
               # The KV cache's queue (clients beyond what it holds) tells the memory held besides it.
               "activation_reserve_bytes": tuple(g * 2**30 for g in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)),
               # Widened where the first fit stopped at the top of SEARCH's values.
               "mfu_scale": (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5),
               "ridge_exponent": (0.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)},
}
# vLLM V0 and V1 run the same kernels: their GPU-side factors are fitted once, on both profiles' fitting
# cells under vllm-v0 (whose ttft_steps comes from the runs' own --num-scheduler-steps 10, not a fit);
# vllm-v1 takes them and differs in the front end and the scheduler limits.
FIT_GROUPS: dict[str, tuple[str, ...]] = {"vllm-v0": ("vllm-v0", "vllm-v1")}


def _mae(preds: list[Prediction]) -> float:
    return round(sum(abs(p.error) for p in preds) / len(preds), 4) if preds else 0.0


def _row(p: Prediction, e: Prediction | None) -> dict[str, Any]:
    c = p.cell
    row: dict[str, Any] = {"id": c.id, "profile": c.engine_profile, "metric": c.metric, "published": c.value,
                           "closed_form": round(p.predicted, 2), "closed_form_error": round(p.error, 4)}
    if e is not None:
        row.update(engine=round(e.predicted, 2), engine_error=round(e.error, 4))
    return row


def _summary(cfs: list[Prediction], engs: list[Prediction]) -> dict[str, Any]:
    out: dict[str, Any] = {"cells": len(cfs), "closed_form_mae": _mae(cfs),
                           "closed_form_worst": round(max((p.error for p in cfs), key=abs), 4)}
    latency_optimistic = [p.cell.id for p in cfs if p.cell.is_latency and p.optimism > OPTIMISM_LIMIT]
    out["closed_form_latency_optimistic_over_20pct"] = latency_optimistic
    if engs:
        out.update(engine_mae=_mae(engs), engine_worst=round(max((p.error for p in engs), key=abs), 4),
                   engine_latency_optimistic_over_20pct=[p.cell.id for p in engs
                                                         if p.cell.is_latency and p.optimism > OPTIMISM_LIMIT])
    def profile_of(p: Prediction) -> str:
        return p.cell.engine_profile

    def source_of(p: Prediction) -> str:
        return p.cell.source

    for key, of in (("by_profile", profile_of), ("by_source", source_of)):
        groups: dict[str, dict[str, float]] = {}
        for name in sorted({of(p) for p in cfs}):
            mine = [p for p in cfs if of(p) == name]
            groups[name] = {"cells": len(mine), "closed_form_mae": _mae(mine)}
            if engs:
                groups[name]["engine_mae"] = _mae([p for p in engs if of(p) == name])
        out[key] = groups
    return out


def published_report(only_closed_form: bool = False, requests_cap: int = 0) -> dict[str, Any]:
    """Each half separately: summary and one row per cell."""
    report: dict[str, Any] = {"sources": {k: s.url for k, s in published_sources().items()}}
    for half in ("fit", "holdout"):
        t0 = time.perf_counter()
        cells = published_cells(split=half)
        cfs = [closed_form(c, get_profile(c.engine_profile)) for c in cells]
        engs = [] if only_closed_form else [engine(c, get_profile(c.engine_profile), requests_cap) for c in cells]
        report[half] = {"summary": _summary(cfs, engs),
                        "rows": [_row(p, engs[i] if engs else None) for i, p in enumerate(cfs)],
                        "wall_s": round(time.perf_counter() - t0, 1)}
    return report


LOSSES = ("closed_form", "engine", "both")


def _loss(cells: tuple[PublishedCell, ...], profile: EngineProfile, loss: str = "closed_form") -> float:
    """Mean absolute error, plus a heavy price for latency predicted optimistic beyond the limit; of the
    closed form, of the stepped engine, or the mean of the two (``both``: one profile serves both)."""
    models = (closed_form, engine) if loss == "both" else (engine,) if loss == "engine" else (closed_form,)
    total = 0.0
    for c in cells:
        for model in models:
            try:
                p = model(c, profile)
            except (ValueError, ZeroDivisionError):
                return float("inf")
            # The price starts at a margin below the limit and only ever adds: optimism is never rewarded.
            total += abs(p.error) + (4.0 * (p.optimism - OPTIMISM_MARGIN)
                                     if c.is_latency and p.optimism > OPTIMISM_MARGIN else 0.0)
    return total / len(cells) / len(models)


def _descend(cells: tuple[PublishedCell, ...], profile: EngineProfile, space: dict[str, tuple[float | None, ...]],
             rounds: int, loss_kind: str = "closed_form") -> tuple[float, EngineProfile]:
    best = _loss(cells, profile, loss_kind)
    for _ in range(rounds):
        for factor, values in space.items():
            for v in values:
                trial = replace(profile, factors=replace(profile.factors, **{factor: v}))
                loss = _loss(cells, trial, loss_kind)
                if loss < best - 1e-9:
                    best, profile = loss, trial
    return best, profile


def fit_profile(name: str, restarts: int = 25, rounds: int = 3, seed: int = 1,
                only: tuple[str, ...] = (), loss: str = "closed_form") -> dict[str, Any]:
    """Coordinate descent over SEARCH (and the profile's EXTRA_SEARCH) on its fitting-half cells, from the
    profile's current values and from ``restarts`` random starting points (seeded: the result repeats).
    ``only`` names the factors to search (the rest keep the profile's values); ``loss`` is what is
    minimised (``_loss``: the closed form's error, the engine's, or both)."""
    if name == "vllm-v1":
        raise SystemExit("vllm-v1's GPU-side factors are vllm-v0's fit (--fit vllm-v0); see perf/profiles.py")
    profile = get_profile(name)
    cells = tuple(c for c in published_cells(split="fit") if c.engine_profile in FIT_GROUPS.get(name, (name,)))
    if not cells:
        raise SystemExit(f"no fitting cells for {name}")
    space = {k: v for k, v in {**SEARCH, **EXTRA_SEARCH.get(name, {})}.items()
             if v and (not only or k in only)}  # () = not searched
    start = _loss(cells, profile, loss)
    best, fitted = _descend(cells, profile, space, rounds, loss)
    rng = random.Random(seed)
    for _ in range(restarts):
        guess = replace(profile, factors=replace(profile.factors, **{k: rng.choice(v) for k, v in space.items()}))
        value, found = _descend(cells, guess, space, rounds, loss)
        if value < best - 1e-9:
            best, fitted = value, found
    f = fitted.factors
    return {"profile": name, "loss_kind": loss, "cells": [c.id for c in cells], "loss_before": round(start, 4),
            "loss": round(best, 4),
            "factors": {k: getattr(f, k) for k in space}}
