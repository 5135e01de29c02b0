"""``turbogate plan``: capacity, cost/ROI and the Turbo decision matrix (the I/O shell).

Every number comes from the pure modules beside this one; this file parses options, reads a
run folder or a config.json when asked, prints Rich tables or JSON, and writes the workbook.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from turbogate.clierrors import OneLineErrors
from turbogate.errors import BadInput, TurbogateError
from turbogate.perf import GPUS, MODELS, Deployment, GiB, deployment, get_gpu, kv_bytes_per_token, resolve_model
from turbogate.perf.default_workload import OUTPUT_TOKENS, PROMPT_TOKENS
from turbogate.plan.burst_cli import burst_cmd
from turbogate.plan.calibrate import Calibration, calibrate, rel_error
from turbogate.plan.capacity import DEFAULT_BATCH_SIZES, CapacityReport, capacity
from turbogate.plan.latency import DEFAULT_KNEE_FACTOR, LatencyModel, latency_model
from turbogate.plan.matrix import DEFAULT_KV_THRESHOLD, MatrixInputs, decide, fitting_tps, thresholds, tp_choices
from turbogate.plan.profile_cli import profile_cmd
from turbogate.plan.profile_opts import engine_profile_option, gpu_profile_option, profiled
from turbogate.plan.roi import RoiInputs, reuse_model, roi
from turbogate.plan.size_cli import size_cmd
from turbogate.plan.views import decision_table, roi_table, thresholds_table, tp_table
from turbogate.plan.views import ms as _ms
from turbogate.plan.xlsx import Scenario, write_workbook

app = typer.Typer(
    help="Size a fleet; predict capacity, cost and ROI; recommend a Turbo mode (Turbo on / capped / Standard only).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
)
app.command("size")(size_cmd)
app.command("profile")(profile_cmd)
app.command("burst")(burst_cmd)

# Piped or captured output gets a wide console so the tables are not truncated to 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=200)

# ---- shared options ----------------------------------------------------------------------------

GPU_OPT = typer.Option("H100-SXM", "--gpu", help="GPU name (see `turbogate plan gpus`); case and punctuation free.")
MODEL_OPT = typer.Option("llama-3.1-8b", "--model",
                         help="Catalog model (see `turbogate plan models`) or a path to a Hugging Face config.json.")
TP_OPT = typer.Option(1, "--tp", min=1, help="Tensor-parallel GPUs per replica.")
DTYPE_OPT = typer.Option("bf16", "--dtype", help="Weight dtype: bf16, fp16, fp8, int8, int4, awq, gptq, fp32.")
KV_DTYPE_OPT = typer.Option("auto", "--kv-dtype", help="KV-cache dtype (auto = as the weights, bf16 under 16 bits).")
MEM_OPT = typer.Option(0.9, "--gpu-mem-util", help="Share of GPU memory the engine may use (vLLM's setting).")
PROMPT_OPT = typer.Option(PROMPT_TOKENS, "--prompt-tokens", min=1, help="Prompt tokens per request.")
OUTPUT_OPT = typer.Option(OUTPUT_TOKENS, "--output-tokens", min=1, help="Output tokens per request.")
SEQS_OPT = typer.Option(256, "--max-num-seqs", min=1, help="Engine's max concurrent sequences (batch size).")
BATCHED_OPT = typer.Option(8192, "--max-num-batched-tokens", min=1, help="Engine's token budget per step.")
KNEE_OPT = typer.Option(DEFAULT_KNEE_FACTOR, "--knee-factor", help="Knee: mean E2E reaches this × its unloaded value.")
JSON_OPT = typer.Option(False, "--json", help="Print JSON instead of tables.")
RUN_OPT = typer.Option(None, "--from-run", help="A bench or sim run folder: use its measured knee and curves.")


@contextmanager
def _clean_errors() -> Iterator[None]:
    """Bad input ends with one clear line on stderr and exit code 2, never a traceback."""
    try:
        yield
    except (TurbogateError, ValueError, FileNotFoundError) as exc:
        raise BadInput(str(exc), getattr(exc, "hint", None)) from exc  # one line, exit 2 (clierrors.py)


def _deployment(gpu: str, model: str, tp: int, dtype: str, kv_dtype: str, gpu_mem_util: float) -> Deployment:
    return deployment(get_gpu(gpu), resolve_model(model), tp=tp, weight_dtype=dtype, kv_dtype=kv_dtype,
                      gpu_mem_util=gpu_mem_util)


def _floats(spec: str | None, name: str) -> list[float] | None:
    if spec is None or not spec.strip():
        return None
    try:
        values = [float(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated numbers, got {spec!r}") from None
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ValueError(f"{name} must be finite numbers >= 0")
    return values


def _ints(spec: str | None, name: str) -> list[int] | None:
    vals = _floats(spec, name)
    if vals is None:
        return None
    if any(v < 1 or v != int(v) for v in vals):
        raise ValueError(f"{name} must be whole numbers >= 1")
    return [int(v) for v in vals]


def _clean(obj: Any) -> Any:
    """JSON-safe: inf and NaN become null."""
    if isinstance(obj, float):
        return None if math.isinf(obj) or math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _print_json(obj: Any) -> None:
    typer.echo(json.dumps(_clean(obj), indent=2))


def _pct(x: float | None) -> str:
    return "—" if x is None or math.isinf(x) else f"{round(x, 3) or 0.0:+.1%}"  # never "-0.0%"


def _load_calibration(run_dir: Path, model: LatencyModel, replicas: int, knee_factor: float) -> Calibration:
    from turbogate.results import load_run

    run = load_run(run_dir, with_requests=False, with_samples=False)
    return calibrate(run.summary, model, replicas=replicas, knee_factor=knee_factor)


def _calibration_table(cal: Calibration) -> Table:
    t = Table(title=f"Predicted vs measured ({cal.kind} run, {cal.replicas} replica(s))")
    for col in ("offered req/s", "TTFT pred ms", "TTFT meas ms", "err", "TPOT pred ms", "TPOT meas ms", "err",
                "achieved pred", "achieved meas", "err"):
        t.add_column(col, justify="right")
    for p in cal.points:
        t.add_row(f"{p.offered_rps:.2f}", _ms(p.predicted_ttft_s), _ms(p.measured_ttft_s),
                  _pct(rel_error(p.predicted_ttft_s, p.measured_ttft_s)), _ms(p.predicted_tpot_s),
                  _ms(p.measured_tpot_s), _pct(rel_error(p.predicted_tpot_s, p.measured_tpot_s)),
                  f"{p.predicted_achieved_rps:.2f}", f"{p.measured_achieved_rps:.2f}",
                  _pct(rel_error(p.predicted_achieved_rps, p.measured_achieved_rps)))
    return t


def _calibration_summary(cal: Calibration) -> Table:
    t = Table(title="Knee and saturation (fleet req/s)")
    for col in ("quantity", "predicted", "measured", "error"):
        t.add_column(col, justify="right")
    mk = "—" if cal.measured_knee_rps is None else f"{cal.measured_knee_rps:.2f} ({cal.knee_method})"
    t.add_row("knee", f"{cal.predicted_knee_rps:.2f}", mk, _pct(rel_error(cal.predicted_knee_rps,
                                                                          cal.measured_knee_rps)))
    t.add_row("saturation / max achieved", f"{cal.predicted_saturation_rps:.2f}", f"{cal.measured_max_rps:.2f}",
              _pct(rel_error(cal.predicted_saturation_rps, cal.measured_max_rps)))
    return t


def _run(fn: Callable[[], None]) -> None:
    with _clean_errors():
        fn()


# ---- capacity --------------------------------------------------------------------------------------


def _capacity_tables(r: CapacityReport) -> list[Table]:
    mem = Table(title=f"{r.model} on {r.tp}× {r.gpu} ({r.weight_dtype} weights, {r.kv_dtype} KV, "
                      f"gpu_mem_util {r.gpu_mem_util})")
    mem.add_column("quantity")
    mem.add_column("value", justify="right")
    comp = "never (≤ 65,536)" if r.compute_bound_batch is None else str(r.compute_bound_batch)
    rows = [
        ("weights", f"{r.weights_bytes / GiB:.2f} GiB"),
        ("KV bytes per token", f"{r.kv_bytes_per_token:,}"),
        ("KV cache", f"{r.kv_cache_bytes / GiB:.2f} GiB"),
        ("KV capacity", f"{r.kv_capacity_tokens:,} tokens ({r.kv_capacity_blocks:,} blocks)"),
        (f"concurrent sequences ({r.prompt_tokens}+{r.output_tokens} tokens)", f"{r.kv_concurrent_seqs:,}"),
        (f"prefill {r.prompt_tokens} tokens", f"{r.prefill_time_s * 1000:.1f} ms"),
        ("unloaded TTFT", f"{r.ttft0_s * 1000:.1f} ms"),
        ("decode turns compute-bound at batch", comp),
        ("saturation batch", f"{r.saturation_batch} (bound: {r.saturation_bound})"),
        ("step at saturation", f"{r.saturation_step_s * 1000:.2f} ms"),
        ("max output tokens/s (prefill mixed in)", f"{r.max_output_tokens_per_s:,.0f}"),
        ("peak decode tokens/s (decode only)", f"{r.peak_decode_tokens_per_s:,.0f}"),
        ("saturation request rate", f"{r.saturation_rate:.2f} req/s"),
        (f"knee (mean E2E = {r.knee_factor:g}× unloaded)", f"{r.knee_rate:.2f} req/s"),
    ]
    for k, v in rows:
        mem.add_row(k, v)
    dec = Table(title=f"Decode step time against batch (context {r.prompt_tokens + r.output_tokens // 2} per seq)")
    for col in ("batch", "step ms", "output tok/s", "bound"):
        dec.add_column(col, justify="right")
    for d in r.decode:
        dec.add_row(str(d.batch), f"{d.step_time_s * 1000:.2f}", f"{d.output_tokens_per_s:,.0f}", d.bound)
    load = Table(title="Predicted latency against request rate (one replica; means)",
                 caption="HBM traffic: the bytes the modelled steps move (weights + KV read + KV written) per second, "
                         "as a share of datasheet bandwidth, averaged over time (idle time counts).\n"
                         "naive bw_util: the formula in circulation, req/s × KV "
                         "bytes/token × (prompt + output tokens) / peak bandwidth — the rate new KV is written once, "
                         "not what bounds decode; shown for comparison (docs/plan.md, worked example).",
                 caption_justify="left")
    for col in ("req/s", "util", "batch", "TTFT ms", "TPOT ms", "E2E s", "KV used", "HBM traffic",
                "naive bw_util"):
        load.add_column(col, justify="right")
    for rp in r.rates:
        p = rp.point
        e2e = "—" if math.isinf(p.e2e_s) else f"{p.e2e_s:.2f}"
        load.add_row(f"{p.rate:.2f}", f"{p.utilization:.0%}", f"{p.batch:.1f}", _ms(p.ttft_s), _ms(p.tpot_s), e2e,
                     f"{p.kv_utilization:.0%}", f"{rp.hbm_util:.0%}", f"{rp.naive_bw_util:.4f}")
    return [mem, dec, load]


@app.command("capacity")
def capacity_cmd(
    gpu: str = GPU_OPT,
    model: str = MODEL_OPT,
    tp: int = TP_OPT,
    dtype: str = DTYPE_OPT,
    kv_dtype: str = KV_DTYPE_OPT,
    gpu_mem_util: float = MEM_OPT,
    prompt_tokens: int = PROMPT_OPT,
    output_tokens: int = OUTPUT_OPT,
    max_num_seqs: int = SEQS_OPT,
    max_num_batched_tokens: int = BATCHED_OPT,
    rates: str = typer.Option(None, "--rates", help="Request rates (req/s, one replica), e.g. 1,5,10,17. "
                              "Default: 10 %–110 % of saturation."),
    batch_sizes: str = typer.Option(None, "--batch-sizes", help="Decode batch sizes to time, e.g. 1,16,64,256."),
    knee_factor: float = KNEE_OPT,
    replicas: int = typer.Option(1, "--replicas", min=1, help="Replicas behind the run given with --from-run."),
    from_run: Path = RUN_OPT,
    as_json: bool = JSON_OPT,
    engine_profile: str = engine_profile_option(),
    gpu_profile: Path | None = gpu_profile_option(),
) -> None:
    """Weights, KV capacity, step times, saturation and predicted TTFT/TPOT against request rate."""

    def go() -> None:
        dep = profiled(_deployment(gpu, model, tp, dtype, kv_dtype, gpu_mem_util), engine_profile, gpu_profile)
        report = capacity(dep, prompt_tokens, output_tokens, max_num_seqs, max_num_batched_tokens,
                          rates=_floats(rates, "--rates"),
                          batch_sizes=_ints(batch_sizes, "--batch-sizes") or DEFAULT_BATCH_SIZES,
                          knee_factor=knee_factor)
        cal = None
        if from_run is not None:
            lm = latency_model(dep, prompt_tokens, output_tokens, max_num_seqs, max_num_batched_tokens)
            cal = _load_calibration(from_run, lm, replicas, knee_factor)
        if as_json:
            out = report.to_dict()
            if cal is not None:
                out["calibration"] = cal.to_dict()
            _print_json(out)
            return
        for t in _capacity_tables(report):
            console.print(t)
        if cal is not None:
            console.print(_calibration_summary(cal))
            console.print(_calibration_table(cal))

    _run(go)


# ---- roi ---------------------------------------------------------------------------------------------


@app.command("roi")
def roi_cmd(
    gpu: str = GPU_OPT,
    model: str = MODEL_OPT,
    tp: int = TP_OPT,
    dtype: str = DTYPE_OPT,
    kv_dtype: str = KV_DTYPE_OPT,
    gpu_mem_util: float = MEM_OPT,
    prompt_tokens: int = PROMPT_OPT,
    output_tokens: int = OUTPUT_OPT,
    max_num_seqs: int = SEQS_OPT,
    max_num_batched_tokens: int = BATCHED_OPT,
    price_per_hour: float = typer.Option(None, "--price-per-hour", help="USD per GPU-hour (default: the catalog's)."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Replicas in the fleet."),
    turbo_multiplier: float = typer.Option(2.0, "--turbo-multiplier", help="Turbo price ÷ Standard price."),
    turbo_reservation: float = typer.Option(0.2, "--turbo-reservation", help="Share of capacity held for Turbo."),
    turbo_share: float = typer.Option(0.2, "--turbo-share", help="Share of requests asking for Turbo."),
    price_per_mtok: float = typer.Option(None, "--price-per-mtok",
                                         help="Standard price, USD per 1M tokens (default: break-even at the knee)."),
    turbo_slo_ttft: float = typer.Option(None, "--turbo-slo-ttft", help="Turbo TTFT SLO, s (default: knee factor "
                                         "× unloaded TTFT)."),
    standard_slo_ttft: float = typer.Option(None, "--standard-slo-ttft", help="Standard TTFT SLO, s (default none)."),
    memory_reuse: float = typer.Option(0.0, "--memory-reuse", help="Share of prompt tokens reused from the prefix "
                                       "cache."),
    cold_start_s: float = typer.Option(0.0, "--cold-start-s", help="Seconds one cold start keeps a replica busy."),
    cold_starts_per_hour: float = typer.Option(0.0, "--cold-starts-per-hour", help="Cold starts per replica-hour."),
    retry_decay: float = typer.Option(0.5, "--retry-decay", help="Probability a failed attempt is retried."),
    max_retries: int = typer.Option(3, "--max-retries", min=0, help="Retries per request at most."),
    loads: str = typer.Option(None, "--loads", help="Fleet loads (req/s), e.g. 10,20,40. Default: one per band."),
    knee_factor: float = KNEE_OPT,
    from_run: Path = RUN_OPT,
    as_json: bool = JSON_OPT,
    engine_profile: str = engine_profile_option(),
    gpu_profile: Path | None = gpu_profile_option(),
) -> None:
    """Cost per 1M tokens and per 1,000 requests per tier, and the ROI of Turbo per load band."""

    def go() -> None:
        dep = profiled(_deployment(gpu, model, tp, dtype, kv_dtype, gpu_mem_util), engine_profile, gpu_profile)
        inputs = RoiInputs(
            price_per_gpu_hour=dep.gpu.price_per_hour if price_per_hour is None else price_per_hour,
            gpus_per_replica=tp, replicas=replicas, turbo_multiplier=turbo_multiplier,
            turbo_reservation=turbo_reservation, turbo_share=turbo_share, price_per_mtok=price_per_mtok,
            turbo_slo_ttft_s=turbo_slo_ttft, standard_slo_ttft_s=standard_slo_ttft, memory_reuse=memory_reuse,
            cold_start_s=cold_start_s, cold_starts_per_hour=cold_starts_per_hour, retry_decay=retry_decay,
            max_retries=max_retries, knee_factor=knee_factor,
        )
        lm = reuse_model(dep, prompt_tokens, output_tokens, memory_reuse, max_num_seqs, max_num_batched_tokens)
        cal = None
        if from_run is not None:
            cal = _load_calibration(from_run, lm, replicas, knee_factor)
        knee = None if cal is None else cal.knee_per_replica
        report = roi(lm, inputs, loads=_floats(loads, "--loads"),
                     tier_latency=None if cal is None else cal.tier_latency, knee_rps=knee,
                     knee_source="predicted" if knee is None else f"measured ({cal.kind if cal else ''})")
        if as_json:
            out = report.to_dict()
            if cal is not None:
                out["calibration"] = cal.to_dict()
            _print_json(out)
            return
        console.print(roi_table(report, measured=cal is not None))
        if cal is not None:
            console.print(_calibration_summary(cal))

    _run(go)


# ---- matrix -------------------------------------------------------------------------------------------


@app.command("matrix")
def matrix_cmd(
    gpu: str = GPU_OPT,
    model: str = MODEL_OPT,
    tp: int = TP_OPT,
    dtype: str = DTYPE_OPT,
    kv_dtype: str = KV_DTYPE_OPT,
    gpu_mem_util: float = MEM_OPT,
    prompt_tokens: int = PROMPT_OPT,
    max_tokens: int = typer.Option(OUTPUT_TOKENS, "--max-tokens", "--output-tokens", min=1,
                                   help="Max output tokens per request (every request is assumed to use them)."),
    batch_size: int = typer.Option(256, "--batch-size", "--max-num-seqs", min=1, help="Engine batch size."),
    max_num_batched_tokens: int = BATCHED_OPT,
    peak_rps: float = typer.Option(None, "--peak-rps", help="Peak request rate of the whole fleet (req/s). "
                                   "Without it: the loads up to which Turbo is on, capped, off."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Replicas in the fleet."),
    kv_threshold: float = typer.Option(DEFAULT_KV_THRESHOLD, "--kv-threshold", help="KV utilization threshold."),
    lora: bool = typer.Option(False, "--lora/--no-lora", help="Are LoRA adapters hot-loaded on demand?"),
    http2: bool = typer.Option(True, "--http2/--no-http2", help="Do clients reuse HTTP/2 connections?"),
    knee_factor: float = KNEE_OPT,
    xlsx: Path = typer.Option(None, "--xlsx", help="Also write an Excel workbook with live formulas."),
    from_run: Path = RUN_OPT,
    as_json: bool = JSON_OPT,
    engine_profile: str = engine_profile_option(),
    gpu_profile: Path | None = gpu_profile_option(),
) -> None:
    """Recommend Turbo on, Turbo capped or Standard only — with the reason of every rule.

    Without --peak-rps: the loads up to which Turbo is on, capped, off (the thresholds)."""

    def go() -> None:
        dep = profiled(_deployment(gpu, model, tp, dtype, kv_dtype, gpu_mem_util), engine_profile, gpu_profile)
        lm = latency_model(dep, prompt_tokens, max_tokens, batch_size, max_num_batched_tokens)
        cal = None
        if from_run is not None:
            cal = _load_calibration(from_run, lm, replicas, knee_factor)
        measured: dict[str, Any] = {}
        if cal is not None and cal.knee_per_replica is not None:
            measured = {"knee_rps": cal.knee_per_replica,
                        "saturation_rps": max(cal.measured_max_rps / replicas, cal.knee_per_replica),
                        "knee_source": f"measured ({cal.kind}, {cal.knee_method})"}
        if peak_rps is None:
            if xlsx is not None:
                raise ValueError("--xlsx needs --peak-rps (the workbook's peak load input)")
            th = thresholds(lm, replicas=replicas, kv_threshold=kv_threshold, lora_hot_loading=lora,
                            http2_reuse=http2, knee_factor=knee_factor, **measured)
            if as_json:
                _print_json({**th.to_dict(), **({"calibration": cal.to_dict()} if cal is not None else {})})
                return
            console.print(thresholds_table(th, f"{dep.model.name} on {tp}× {dep.gpu.name}"))
            if cal is not None:
                console.print(_calibration_summary(cal))
            return
        inputs = MatrixInputs(peak_rps=peak_rps, replicas=replicas, kv_threshold=kv_threshold,
                              lora_hot_loading=lora, http2_reuse=http2, knee_factor=knee_factor)
        decision = decide(lm, inputs, **measured)
        tps = () if cal is not None else tp_choices(
            fitting_tps(dep, prompt_tokens, max_tokens, batch_size, max_num_batched_tokens), peak_rps,
            dep.gpu.price_per_hour, knee_factor)
        written = None
        if xlsx is not None:
            if cal is not None:
                raise ValueError("--xlsx writes the predicted model's formulas; drop --from-run to write it")
            written = write_workbook(xlsx, [Scenario(f"{dep.model.name} on {dep.gpu.name}", dep, prompt_tokens,
                                                     max_tokens, batch_size, max_num_batched_tokens, inputs,
                                                     engine_profile)])
        if as_json:
            out = decision.to_dict()
            if cal is not None:
                out["calibration"] = cal.to_dict()
            if written is not None:
                out["xlsx"] = str(written)
            _print_json({**out, "tp_choices": [c.to_dict() for c in tps]})
            return
        console.print(decision_table(decision, replicas))
        if tps:
            console.print(tp_table(tps, tp, dep.gpu.name))
        if cal is not None:
            console.print(_calibration_summary(cal))
        if written is not None:
            console.print(f"workbook written: {written} (edit the inputs sheet; the matrix sheet recomputes)")

    _run(go)


# ---- catalogs -----------------------------------------------------------------------------------------


@app.command("gpus")
def gpus_cmd(as_json: bool = JSON_OPT) -> None:
    """The GPU catalog: memory, bandwidth, dense FLOP/s, indicative price."""
    if as_json:
        _print_json([{"name": g.name, "hbm_bytes": g.hbm_bytes, "hbm_gib": g.hbm_bytes / GiB,
                      "hbm_bandwidth": g.hbm_bandwidth, "bf16_flops": g.bf16_flops, "fp8_flops": g.fp8_flops,
                      "price_per_hour": g.price_per_hour, "source": g.source} for g in GPUS.values()])
        return
    t = Table(title="GPUs")
    for col in ("name", "HBM GiB", "HBM TB/s", "BF16 TFLOP/s", "FP8 TFLOP/s", "USD/h", "source"):
        t.add_column(col, justify="right" if col not in ("name", "source") else "left")
    for g in GPUS.values():
        t.add_row(g.name, f"{g.hbm_bytes / GiB:.0f}", f"{g.hbm_bandwidth / 1e12:.3g}", f"{g.bf16_flops / 1e12:,.0f}",
                  "—" if g.fp8_flops is None else f"{g.fp8_flops / 1e12:,.0f}", f"{g.price_per_hour:.2f}", g.source)
    console.print(t)


@app.command("models")
def models_cmd(
    config: Path = typer.Option(None, "--model", help="Also show a custom model from a config.json path."),
    as_json: bool = JSON_OPT,
) -> None:
    """The model catalog (and a custom config.json with --model)."""

    def go() -> None:
        specs = list(MODELS.values())
        if config is not None:
            specs.append(resolve_model(str(config)))
        if as_json:
            _print_json([{"name": m.name, "n_params": m.n_params, "n_active_params": m.n_active_params,
                          "n_layers": m.n_layers, "hidden_size": m.hidden_size, "n_heads": m.n_heads,
                          "n_kv_heads": m.n_kv_heads, "head_dim": m.head_dim, "n_experts": m.n_experts,
                          "experts_per_token": m.experts_per_token, "max_context": m.max_context,
                          "kv_bytes_per_token_bf16": kv_bytes_per_token(m, "bf16")} for m in specs])
            return
        t = Table(title="Models")
        for col in ("name", "params B", "active B", "layers", "heads", "KV heads", "head dim", "KV B/token (bf16)",
                    "context"):
            t.add_column(col, justify="right" if col != "name" else "left")
        for m in specs:
            t.add_row(m.name, f"{m.n_params / 1e9:.2f}", f"{m.n_active_params / 1e9:.2f}", str(m.n_layers),
                      str(m.n_heads), str(m.n_kv_heads), str(m.head_dim), f"{kv_bytes_per_token(m, 'bf16'):,}",
                      f"{m.max_context:,}")
        console.print(t)

    _run(go)
