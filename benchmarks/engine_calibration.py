"""Predicted offline throughput against published measurements, per cell, for the stepped engine
and the closed form (``turbogate.perf.saturation``).  Prints ONE JSON object.

Reference table: ``turbogate.perf.published.TRTLLM_CELLS`` (TensorRT-LLM perf overview, 20 cells:
Llama-3.1-8B on H100/H200, Llama-3.3-70B on H100 TP2 / H200 TP1, FP8 weights and KV cache,
shapes 128/128, 1000/1000, 2048/128, 5000/500, 20000/2000); ``TRTLLM_HOLDOUT_CELLS``, the page's 20
other cells (long outputs), a hold-out (only H200's bw_efficiency looked at two of its shapes); and
``OTHER_ENGINE_CELLS``, public measurements from a different engine that no constant was tuned on.
Those run with that engine's KV read efficiency (``Cell.kv_bw_efficiency``, fitted on another of its
measurements: benchmarks/sglang_replay.py); ``engine_error_kv_as_weights`` is the same model reading
the KV as fast as the weights.

The engine runs each cell's request count (the page's ``$num_requests``) queued at t = 0 in virtual
time on ``Engine(deployment(gpu, model, tp, fp8, fp8 KV, gpu_mem_util=0.95))``; throughput is
output tokens / virtual seconds.  Error = (predicted − published) / published.

Published cells (issue 40): ``perf/data/published_cells.yaml`` holds cells from five other public
sources (SGLang's v0.3.0-vs-vLLM-0.6.0 README, datacrunch's H200 result files, NVIDIA NIM's benchmarking
page, a vLLM 0.23 sweep, vLLM's CI), each with its provenance and its half, fixed by a hash of its id
before anything was fitted.  Each runs under its engine's profile (``perf.profiles``); the output's
``published`` part reports the fitting half and the hold-out half separately: mean absolute error of
the engine and of the closed form, the worst cells, and the latency cells predicted optimistic (shorter
than published) by more than 20 %.  ``--fit PROFILE`` searches that profile's factors on its fitting
cells (coordinate descent on the closed form's error, or with ``--fit-loss engine|both`` the stepped
engine's or the mean of the two) and prints them instead; the values in perf/profiles.py came from it.
Each half's summary also groups the cells by engine profile and by source.

    python benchmarks/engine_calibration.py [--max-num-seqs 2048] [--max-num-batched-tokens 8192]
                                            [--requests-cap N] [--only-closed-form] [--skip-holdout]
                                            [--skip-overview] [--fit PROFILE [--fit-only F1,F2]
                                            [--fit-loss closed_form|engine|both] [--fit-restarts 25]]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from published_fit import LOSSES, fit_profile, published_report
from turbogate.engine import Engine, EngineConfig, Request
from turbogate.perf import deployment, get_gpu, get_model, saturation
from turbogate.perf.published import OTHER_ENGINE_CELLS, TRTLLM_CELLS, TRTLLM_HOLDOUT_CELLS, TRTLLM_SOURCE, Cell

# (model, gpu, tp, isl, osl) -> (engine error, closed-form error) of this script at commit cf84868 (before
# issue 16: no prefix cache for preempted requests, prefill spread under decode, flat TP all-reduce).
BEFORE: dict[tuple[str, str, int, int, int], tuple[float, float]] = {
    ("llama-3.1-8b", "H100-SXM", 1, 128, 128): (-0.0422, -0.0459),
    ("llama-3.1-8b", "H100-SXM", 1, 1000, 1000): (-0.0145, 0.429),
    ("llama-3.1-8b", "H100-SXM", 1, 2048, 128): (-0.0185, -0.0087),
    ("llama-3.1-8b", "H100-SXM", 1, 5000, 500): (-0.0707, 0.485),
    ("llama-3.1-8b", "H100-SXM", 1, 20000, 2000): (-0.5369, 0.2497),
    ("llama-3.1-8b", "H200", 1, 128, 128): (-0.0284, -0.0322),
    ("llama-3.1-8b", "H200", 1, 1000, 1000): (0.0587, 0.475),
    ("llama-3.1-8b", "H200", 1, 2048, 128): (-0.0378, -0.095),
    ("llama-3.1-8b", "H200", 1, 5000, 500): (0.0199, 0.2967),
    ("llama-3.1-8b", "H200", 1, 20000, 2000): (-0.4114, 0.4125),
    ("llama-3.3-70b", "H100-SXM", 2, 128, 128): (0.0611, 0.0572),
    ("llama-3.3-70b", "H100-SXM", 2, 1000, 1000): (0.0511, 0.5202),
    ("llama-3.3-70b", "H100-SXM", 2, 2048, 128): (0.0054, 0.0488),
    ("llama-3.3-70b", "H100-SXM", 2, 5000, 500): (0.0062, 0.3437),
    ("llama-3.3-70b", "H100-SXM", 2, 20000, 2000): (-0.7828, 0.7854),
    ("llama-3.3-70b", "H200", 1, 128, 128): (-0.1606, -0.0942),
    ("llama-3.3-70b", "H200", 1, 1000, 1000): (-0.1836, 0.16),
    ("llama-3.3-70b", "H200", 1, 2048, 128): (-0.122, -0.085),
    ("llama-3.3-70b", "H200", 1, 5000, 500): (-0.1462, 0.0993),
    ("llama-3.3-70b", "H200", 1, 20000, 2000): (-0.8462, 0.9005),
}


def _dep(cell: Cell, dtype: str, kv: str, mem: float, own_kv: bool = True):  # type: ignore[no-untyped-def]
    """The cell's deployment; with ``own_kv`` its engine's KV read efficiency (``Cell.kv_bw_efficiency``),
    else the KV read as fast as the weights."""
    dep = deployment(get_gpu(cell.gpu), get_model(cell.model), tp=cell.tp, weight_dtype=dtype, kv_dtype=kv,
                     gpu_mem_util=mem)
    kv_eff = cell.kv_bw_efficiency
    return dep.with_factors(kv_bw_efficiency=kv_eff) if own_kv and kv_eff is not None else dep


def engine_tok_s(cell: Cell, n: int, cfg: EngineConfig, dtype: str, kv: str, mem: float,
                 own_kv: bool = True) -> tuple[float, int]:
    eng = Engine(_dep(cell, dtype, kv, mem, own_kv), cfg)
    rng = random.Random(0)
    out = 0
    for i in range(n):
        isl, osl = ((rng.randint(1, cell.isl), rng.randint(1, cell.osl)) if cell.uniform_lengths
                    else (cell.isl, cell.osl))
        eng.add_request(Request(str(i), isl, osl), 0.0)
        out += osl
    now = 0.0
    while eng.has_work():
        now += eng.step(now).duration
    return out / now, eng.stats().num_preemptions


def _mean_shape(cell: Cell) -> tuple[int, int]:
    """The closed form takes one shape: the mean lengths where they are drawn uniformly."""
    if cell.uniform_lengths:
        return (cell.isl + 1) // 2, (cell.osl + 1) // 2
    return cell.isl, cell.osl


def closed_form_tok_s(cell: Cell, cfg: EngineConfig, dtype: str, kv: str, mem: float) -> float:
    isl, osl = _mean_shape(cell)
    return saturation(_dep(cell, dtype, kv, mem), isl, osl, cfg.max_num_seqs,
                      cfg.max_num_batched_tokens).output_tokens_per_s


def _err(pred: float, pub: float) -> float:
    return round((pred - pub) / pub, 4)


def _mae(errors: list[float]) -> float:
    return round(sum(abs(e) for e in errors) / len(errors), 4) if errors else 0.0


def run(cells: tuple[Cell, ...], args: argparse.Namespace, cfg: EngineConfig) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for cell in cells:
        dtype, kv, mem = cell.dtype, cell.kv_dtype, args.gpu_mem_util or cell.gpu_mem_util
        row: dict[str, object] = {"model": cell.model, "gpu": cell.gpu, "tp": cell.tp, "isl": cell.isl,
                                  "osl": cell.osl, "published": cell.output_tok_s}
        cf = closed_form_tok_s(cell, cfg, dtype, kv, mem)
        row["closed_form"] = round(cf)
        row["closed_form_error"] = _err(cf, cell.output_tok_s)
        before = BEFORE.get((cell.model, cell.gpu, cell.tp, cell.isl, cell.osl))
        if before is not None:
            row["engine_error_before"], row["closed_form_error_before"] = before
        if not args.only_closed_form:
            n = min(cell.requests, args.requests_cap) if args.requests_cap else cell.requests
            t0 = time.perf_counter()
            tok_s, preemptions = engine_tok_s(cell, n, cfg, dtype, kv, mem)
            row.update(engine=round(tok_s), engine_error=_err(tok_s, cell.output_tok_s), requests=n,
                       preemptions=preemptions, wall_s=round(time.perf_counter() - t0, 2))
            if cell.kv_bw_efficiency is not None:  # what the same model gives reading the KV like the weights
                same, _ = engine_tok_s(cell, n, cfg, dtype, kv, mem, own_kv=False)
                row["kv_bw_efficiency"] = cell.kv_bw_efficiency
                row["engine_error_kv_as_weights"] = _err(same, cell.output_tok_s)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-num-seqs", type=int, default=2048)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--gpu-mem-util", type=float, default=0.0,
                        help="override every cell's KV memory share (0: each cell's own, 0.95 for TensorRT-LLM)")
    parser.add_argument("--requests-cap", type=int, default=0, help="run at most N requests per cell (0: the page's)")
    parser.add_argument("--only-closed-form", action="store_true")
    parser.add_argument("--skip-holdout", action="store_true",
                        help="leave out the hold-out: the same page's 20 long-output cells")
    parser.add_argument("--skip-overview", action="store_true",
                        help="only the published cells of perf/data/published_cells.yaml, not TensorRT-LLM's table")
    parser.add_argument("--fit", metavar="PROFILE", default=None,
                        help="search PROFILE's factors on its fitting-half cells and print them (no report)")
    parser.add_argument("--fit-only", metavar="FACTORS", default="",
                        help="with --fit: search only these factors (comma-separated), the rest kept")
    parser.add_argument("--fit-loss", choices=LOSSES, default="closed_form",
                        help="with --fit: minimise the closed form's error, the stepped engine's, or their mean")
    parser.add_argument("--fit-restarts", type=int, default=25, help="with --fit: random starting points")
    args = parser.parse_args()
    if args.fit:
        only = tuple(f for f in args.fit_only.split(",") if f)
        print(json.dumps(fit_profile(args.fit, restarts=args.fit_restarts, only=only, loss=args.fit_loss)))
        return
    published = published_report(args.only_closed_form, args.requests_cap)
    if args.skip_overview:
        print(json.dumps({"published": published}))
        return
    cfg = EngineConfig(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens)
    trt = run(TRTLLM_CELLS, args, cfg)
    holdout = [] if args.skip_holdout else run(TRTLLM_HOLDOUT_CELLS, args, cfg)
    other = run(OTHER_ENGINE_CELLS, args, cfg)
    cf_errs: list[float] = [r["closed_form_error"] for r in trt]  # type: ignore[misc]
    summary: dict[str, object] = {
        "closed_form_mae": _mae(cf_errs), "closed_form_worst": max(cf_errs, key=abs),
        "closed_form_mae_before": _mae([b for _, b in BEFORE.values()]),
        "engine_mae_before": _mae([e for e, _ in BEFORE.values()]),
        "engine_worst_before": max((e for e, _ in BEFORE.values()), key=abs),
    }
    if not args.only_closed_form:
        errs: list[float] = [r["engine_error"] for r in trt]  # type: ignore[misc]
        other_errs: list[float] = [r["engine_error"] for r in other]  # type: ignore[misc]
        summary.update(engine_mae=_mae(errs), engine_worst=max(errs, key=abs),
                       other_engine_engine_errors=other_errs,
                       other_engine_within_25pct=sum(abs(e) <= 0.25 for e in other_errs),
                       other_engine_engine_errors_kv_as_weights=[r.get("engine_error_kv_as_weights")
                                                                 for r in other])
    summary["other_engine_closed_form_errors"] = [r["closed_form_error"] for r in other]
    if holdout:
        summary["holdout_closed_form_mae"] = _mae([r["closed_form_error"] for r in holdout])  # type: ignore[misc]
        if not args.only_closed_form:
            held: list[float] = [r["engine_error"] for r in holdout]  # type: ignore[misc]
            summary.update(holdout_engine_mae=_mae(held), holdout_engine_range=[min(held), max(held)])
    print(json.dumps({
        "published": published,
        "reference": TRTLLM_SOURCE,
        "other_engine_reference": OTHER_ENGINE_CELLS[0].source if OTHER_ENGINE_CELLS else None,
        "config": {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
                   "gpu_mem_util": args.gpu_mem_util},
        "summary": summary,
        "trtllm": trt,
        "trtllm_holdout": holdout,
        "other_engine": other,
    }))


if __name__ == "__main__":
    main()
