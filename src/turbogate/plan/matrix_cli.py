"""``turbogate plan matrix``: Turbo on, capped or Standard only, with each rule's reason, and the
workbook (the shell; the rules are :mod:`turbogate.plan.matrix`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from turbogate.perf.default_workload import OUTPUT_TOKENS
from turbogate.plan.cli_common import (
    BATCHED_OPT,
    DTYPE_OPT,
    GPU_OPT,
    JSON_OPT,
    KNEE_OPT,
    KV_DTYPE_OPT,
    MEM_OPT,
    MODEL_OPT,
    PROMPT_OPT,
    RUN_OPT,
    TP_OPT,
    calibration_summary,
    console,
    deployment_of,
    load_calibration,
    print_json,
    run,
)
from turbogate.plan.latency import latency_model
from turbogate.plan.matrix import DEFAULT_KV_THRESHOLD, MatrixInputs, decide, fitting_tps, thresholds, tp_choices
from turbogate.plan.profile_opts import engine_profile_option, gpu_profile_option, profiled
from turbogate.plan.views import decision_table, thresholds_table, tp_table
from turbogate.plan.xlsx import Scenario, write_workbook


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
        dep = profiled(deployment_of(gpu, model, tp, dtype, kv_dtype, gpu_mem_util), engine_profile, gpu_profile)
        lm = latency_model(dep, prompt_tokens, max_tokens, batch_size, max_num_batched_tokens)
        cal = None
        if from_run is not None:
            cal = load_calibration(from_run, lm, replicas, knee_factor)
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
                print_json({**th.to_dict(), **({"calibration": cal.to_dict()} if cal is not None else {})})
                return
            console.print(thresholds_table(th, f"{dep.model.name} on {tp}× {dep.gpu.name}"))
            if cal is not None:
                console.print(calibration_summary(cal))
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
            print_json({**out, "tp_choices": [c.to_dict() for c in tps]})
            return
        console.print(decision_table(decision, replicas))
        if tps:
            console.print(tp_table(tps, tp, dep.gpu.name))
        if cal is not None:
            console.print(calibration_summary(cal))
        if written is not None:
            console.print(f"workbook written: {written} (edit the inputs sheet; the matrix sheet recomputes)")

    run(go)
