"""``turbogate plan size``: the cheapest fleets that meet per-tier p95 SLOs at a peak (the shell).

The search is :func:`turbogate.plan.size.size`; the candidates and the simulated runs come from
:mod:`turbogate.plan.size_sim`.  This file parses options, prints progress on stderr, a ranked
table or JSON.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from turbogate.config import load_config
from turbogate.errors import BadInput, ConfigError, TurbogateError
from turbogate.perf.default_workload import OUTPUT_TOKENS, PROMPT_TOKENS
from turbogate.perf.profiles import get_profile
from turbogate.plan.knee import DEFAULT_KNEE_FACTOR
from turbogate.plan.profile_opts import engine_profile_option, gpu_profile_option
from turbogate.plan.size import Candidate, Fleet, Measured, SizeInputs, SizeResult, TierSLO, size
from turbogate.plan.size_sim import (
    DEFAULT_TPS,
    WARMUP_S,
    Engine,
    SimMeasure,
    candidates,
    data_centre_gpus,
    window_s,
)
from turbogate.sim.sweep import default_jobs

DEFAULT_TURBO_TTFT_P95_S = 0.5
DEFAULT_STANDARD_TTFT_P95_S = 3.0


def _names(spec: str | None, what: str) -> list[str]:
    items = [x.strip() for x in (spec or "").split(",") if x.strip()]
    if spec is not None and not items:
        raise ValueError(f"{what} must list at least one value")
    return items


def _tps(spec: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in _names(spec, "--tp"))
    except ValueError:
        raise ValueError(f"--tp must be comma-separated whole numbers, got {spec!r}") from None
    if any(v < 1 for v in values):
        raise ValueError("--tp values must be >= 1")
    return values


def _pool_of(config_path: Path, model: str, needs_turbo: bool) -> tuple[Any, str]:
    """The config and its first pool serving ``model``; the simulated requests are its first tenant's."""
    gw = load_config(config_path)
    pool = next((p.name for p in gw.pools if model in p.models), None)
    if pool is None:
        raise ConfigError(f"{config_path}: no pool serves {model!r} (pools.*.models)")
    if needs_turbo and "turbo" not in gw.tenants[0].tiers:
        raise ConfigError(f"{config_path}: tenants.0 ({gw.tenants[0].name}), whose requests are simulated, may not "
                          "use turbo (tenants.0.tiers); list a tenant allowed Turbo first")
    return gw, pool


def size_cmd(
    model: str = typer.Option("llama-3.1-8b", "--model",
                              help="Catalog model (see `turbogate plan models`) or a path to a Hugging Face "
                                   "config.json."),
    peak_rps: float = typer.Option(None, "--peak-rps", help="Peak request rate of the whole fleet (req/s); "
                                   "or --trace."),
    trace: Path = typer.Option(None, "--trace", help="Take the workload from a trace (any format bench --trace "
                               "reads): its busiest minute's rate as the peak (unless --peak-rps), its mean prompt "
                               "and output tokens as the lengths (`turbogate trace show FILE` prints them)."),
    trace_speedup: float = typer.Option(1.0, "--trace-speedup", min=1e-6, help="The trace's rate as replayed K "
                                        "times faster."),
    gpus: str = typer.Option(None, "--gpus", help="Candidate GPUs, comma-separated (see `turbogate plan gpus`). "
                             "Default: the catalog's data-centre GPUs (those with an NVLink / Infinity Fabric class "
                             "link)."),
    tp: str = typer.Option(",".join(map(str, DEFAULT_TPS)), "--tp", help="Tensor-parallel sizes to try."),
    prompt_tokens: int = typer.Option(PROMPT_TOKENS, "--prompt-tokens", min=1, help="Prompt tokens per request."),
    output_tokens: int = typer.Option(OUTPUT_TOKENS, "--output-tokens", min=1, help="Output tokens per request."),
    turbo_share: float = typer.Option(0.2, "--turbo-share", help="Share of requests asking for Turbo (0–1)."),
    turbo_ttft_p95: float = typer.Option(DEFAULT_TURBO_TTFT_P95_S, "--turbo-ttft-p95",
                                         help="Turbo SLO: p95 time to first token, seconds."),
    standard_ttft_p95: float = typer.Option(DEFAULT_STANDARD_TTFT_P95_S, "--standard-ttft-p95",
                                            help="Standard SLO: p95 time to first token, seconds."),
    turbo_itl_p95: float = typer.Option(None, "--turbo-itl-p95", help="Optional Turbo SLO: p95 inter-token "
                                        "latency, seconds, judged on each request's mean gap (TPOT)."),
    standard_itl_p95: float = typer.Option(None, "--standard-itl-p95", help="Optional Standard SLO: p95 "
                                           "inter-token latency, seconds (as --turbo-itl-p95)."),
    top: int = typer.Option(3, "--top", min=1, help="Fleets to confirm in the simulator and rank."),
    dtype: str = typer.Option("bf16", "--dtype", help="Weight dtype: bf16, fp16, fp8, int8, int4, awq, gptq, fp32."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV-cache dtype (auto = as the weights)."),
    gpu_mem_util: float = typer.Option(0.9, "--gpu-mem-util", help="Share of GPU memory the engine may use."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", min=1, help="Engine's max concurrent sequences."),
    max_num_batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens", min=1,
                                               help="Engine's token budget per step."),
    knee_factor: float = typer.Option(DEFAULT_KNEE_FACTOR, "--knee-factor",
                                      help="Closed-form knee: mean E2E reaches this × its unloaded value."),
    engine_profile: str = engine_profile_option(),
    gpu_profile: Path | None = gpu_profile_option(),
    config: Path = typer.Option(None, "--config", help="Simulate behind this gateway config (its tiers, "
                                "concurrency, the pool serving --model). Default: the gateway's default tiers."),
    duration: float = typer.Option(None, "--duration", min=1, help="Simulated seconds judged per fleet, after "
                                   f"a {WARMUP_S:g} s warm-up. Default: enough for 400 requests of the smaller "
                                   "tier (30–300 s)."),
    seed: int = typer.Option(1, "--seed", help="Random seed of the simulated arrivals."),
    jobs: int = typer.Option(0, "--jobs", min=0, help="Candidates simulated at once, each in its own process "
                             "(0: one per core, at most 4; 1: in this process)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="A line on stderr per simulated fleet."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Size a fleet: ranked GPU × TP × replicas meeting per-tier p95 TTFT SLOs at a peak, cheapest first.

    The closed form prunes the candidates (the fewest replicas whose mean TTFT could meet each p95);
    the simulator (the gateway's own core, virtual time) confirms the cheapest: each fleet shown meets
    every SLO there, and one replica fewer misses one."""
    try:
        wall = time.perf_counter()
        if trace is not None:
            from turbogate.trace.importers import load_trace
            from turbogate.trace.stats import trace_workload

            load = trace_workload(load_trace(trace), speedup=trace_speedup)
            peak_rps = peak_rps if peak_rps is not None else load.peak_rps
            prompt_tokens, output_tokens = round(load.prompt.mean), max(1, round(load.output.mean))
        if peak_rps is None:
            raise ValueError("give --peak-rps R (or --trace FILE to take the peak from a trace)")
        slos = {"turbo": TierSLO(turbo_ttft_p95, turbo_itl_p95), "standard": TierSLO(standard_ttft_p95,
                                                                                     standard_itl_p95)}
        inputs = SizeInputs(peak_rps=peak_rps, turbo_share=turbo_share, slos=slos, top=top)
        measured = None
        if gpu_profile is not None:
            from turbogate.plan.profile_cli import load_gpu_profile  # numpy only when a profile is read

            measured = load_gpu_profile(gpu_profile)
        engine = Engine(model, prompt_tokens, output_tokens, dtype, kv_dtype, gpu_mem_util, max_num_seqs,
                        max_num_batched_tokens, knee_factor, get_profile(engine_profile).name,
                        measured.gpu_name if measured else None, measured.bw_efficiency if measured else None,
                        measured.mfu if measured else None)
        names = _names(gpus, "--gpus") or list(data_centre_gpus())
        cands, left_out = candidates(engine, names, _tps(tp))
        if not cands:
            raise ValueError(f"{model} fits none of the candidates: " + "; ".join(left_out[:3]))
        measure = SimMeasure(engine, inputs, seed=seed, duration_s=duration)
        if config is not None:
            measure.gateway, measure.pool = _pool_of(config, model, turbo_share > 0)
        log = _Log(progress, inputs)
        workers = jobs or min(4, default_jobs())
        if workers == 1:
            result = size(cands, inputs, measure, log.candidate, log.searched)
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                result = size(cands, inputs, measure, log.candidate, log.searched, executor=pool, jobs=workers)
    except (TurbogateError, ValueError, FileNotFoundError) as exc:
        raise BadInput(str(exc), getattr(exc, "hint", None)) from exc  # one line, exit 2 (clierrors.py)
    elapsed = time.perf_counter() - wall
    window = duration or window_s(inputs)
    if as_json:
        out = {"inputs": {"model": model, "peak_rps": peak_rps, "prompt_tokens": prompt_tokens,
                          "output_tokens": output_tokens, "turbo_share": turbo_share,
                          "slos": {t: {"ttft_p95_s": s.ttft_p95_s, "itl_p95_s": s.itl_p95_s} for t, s in slos.items()},
                          "gpus": names, "tp": list(_tps(tp)), "window_s": window, "warmup_s": WARMUP_S,
                          "seed": seed},
               **result.to_dict(), "not_fitting": left_out, "wall_s": elapsed}
        for row, f in zip(out["fleets"], result.fleets, strict=True):  # `turbogate sim --fleet` reruns it
            row["fleet_file"] = measure.fleet_data(f.candidate, f.replicas)
        typer.echo(json.dumps(_clean(out), indent=2))
        return
    console = Console() if sys.stdout.isatty() else Console(width=200)
    if not result.fleets:
        console.print(_verdict(result, inputs))
        for s in result.skipped[:8]:
            console.print(f"  {s.gpu} TP{s.tp}: {s.reason}")
        raise typer.Exit(code=1)
    console.print(_table(result, inputs, engine, window))
    console.print(_verdict(result, inputs))
    console.print(_summary(result, len(left_out), elapsed))


class _Log:
    """Progress on stderr: a line when a candidate is sent to the simulator, one per fleet it simulated."""

    def __init__(self, enabled: bool, inputs: SizeInputs) -> None:
        self.enabled, self.slos = enabled, inputs.active_slos

    def candidate(self, c: Candidate, n: int) -> None:
        if self.enabled:
            typer.echo(f"plan size: {c.gpu} TP{c.tp}: the closed form needs at least {n} replicas; simulating",
                       err=True)

    def searched(self, c: Candidate, runs: dict[int, Measured]) -> None:
        if not self.enabled:
            return
        for n, m in sorted(runs.items()):
            misses = m.misses(self.slos)
            typer.echo(f"plan size:   {n} × {c.gpu} TP{c.tp}: " + ("; ".join(misses) if misses else "every SLO met")
                       + f" ({m.wall_s:.1f} s)", err=True)


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if not math.isfinite(obj) else obj
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _sec(x: float | None) -> str:
    return "unserved" if x is None else f"{x:.3f}"


def _first_miss(f: Fleet) -> str:
    if f.smaller is None:
        return "— (1 is the least)"
    return f.smaller_misses[0] if f.smaller_misses else "—"


def _table(result: SizeResult, inputs: SizeInputs, engine: Engine, window: float) -> Table:
    slos = inputs.active_slos
    itl = any(s.itl_p95_s is not None for s in slos.values())
    t = Table(title=f"Fleets for {inputs.peak_rps:g} req/s of {engine.model} ({engine.prompt_tokens} prompt + "
                    f"{engine.output_tokens} output tokens, Turbo {inputs.turbo_share:.0%}), cheapest first; SLOs: "
                    + ", ".join(f"{tier} TTFT p95 ≤ {s.ttft_p95_s:g} s" + (f", ITL p95 ≤ {s.itl_p95_s:g} s"
                                                                            if s.itl_p95_s is not None else "")
                                for tier, s in slos.items()),
              caption=f"p95: simulated (sim: the gateway's own core; {window:g} s at the peak after a {WARMUP_S:g} s "
                      "warm-up; a shed request counts as a miss). The fleet meets every SLO over the window and its "
                      "second half; 'one replica fewer' shows the first SLO it misses.\nheadroom: the closed form's "
                      "fleet knee (mean E2E at knee factor × unloaded) or saturation (sat.) over the peak, minus 1; "
                      "negative: the peak is past it.", caption_justify="left")
    cols = ["#", "GPU", "TP", "replicas", "GPUs", "USD/h"]
    cols += [f"{tier.capitalize()} TTFT p95 s (sim)" for tier in slos]
    if itl:
        cols += [f"{tier.capitalize()} TPOT p95 s (sim)" for tier in slos]
    cols += ["one replica fewer (sim)", "knee headroom (closed form)", "sat. headroom (closed form)"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("GPU", "one replica fewer (sim)") else "right")
    for i, f in enumerate(result.fleets, 1):
        row = [str(i), f.candidate.gpu, str(f.candidate.tp), str(f.replicas), str(f.gpus), f"{f.cost_per_hour:.2f}"]
        row += [_sec(f.measured.ttft_p95_s.get(tier)) for tier in slos]
        if itl:
            row += [_sec(f.measured.tpot_p95_s.get(tier)) for tier in slos]
        row += [_first_miss(f), f"{f.knee_headroom:+.0%}", f"{f.saturation_headroom:+.0%}"]
        t.add_row(*row)
    return t


_SKIP_WORDS = {"pruned": "pruned by cost", "over_slo_unloaded": "over an SLO even unloaded",
               "not_confirmed": "not confirmed"}


def _summary(result: SizeResult, not_fitting: int, elapsed: float) -> str:
    kinds: Counter[str] = Counter(s.kind for s in result.skipped)
    why = ", ".join(f"{kinds[k]} {words}" for k, words in _SKIP_WORDS.items() if kinds[k])
    parts = [f"{result.simulations} fleets simulated"]
    if result.skipped:
        parts.append(f"{len(result.skipped)} candidates not ranked ({why})")
    if not_fitting:
        parts.append(f"{not_fitting} GPU × TP cannot hold the model")
    return ", ".join(parts) + f"; --json lists them. {elapsed:.1f} s."


def _verdict(result: SizeResult, inputs: SizeInputs) -> str:
    if not result.fleets:
        return ("No fleet confirmed: every candidate was pruned or missed its SLOs within the simulations allowed "
                "(--json lists why); loosen an SLO, add --gpus or --tp values.")
    f = result.fleets[0]
    p95 = ", ".join(f"{tier} TTFT p95 {_sec(f.measured.ttft_p95_s.get(tier))} s"
                    for tier in inputs.active_slos)
    gpus = f"{f.gpus} GPU" + ("s" if f.gpus != 1 else "")
    return (f"Recommendation: {f.replicas} × {f.candidate.gpu} TP{f.candidate.tp} ({gpus}, "
            f"{f.cost_per_hour:.2f} USD/h): {p95} (simulated).")
