"""``turbogate plan matrix``: Turbo on, capped or Standard only, with each rule's reason, and the
workbook (the shell; the rules are :mod:`turbogate.plan.matrix`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from turbogate.optgroup import expand
from turbogate.perf.default_workload import OUTPUT_TOKENS
from turbogate.plan import cli_common as common
from turbogate.plan.latency import latency_model
from turbogate.plan.matrix import DEFAULT_KV_THRESHOLD, MatrixInputs, decide, fitting_tps, thresholds, tp_choices
from turbogate.plan.views import decision_table, thresholds_table, tp_table
from turbogate.plan.xlsx import Scenario, write_workbook


@expand(hw=common.DEPLOYMENT_OPTIONS)
def matrix_cmd(
    hw: common.DeploymentArgs = common.HW,
    prompt_tokens: int = common.PROMPT_OPT,
    max_tokens: int = typer.Option(OUTPUT_TOKENS, "--max-tokens", "--output-tokens", min=1,
                                   help="Max output tokens per request (every request is assumed to use them)."),
    batch_size: int = typer.Option(256, "--batch-size", "--max-num-seqs", min=1, help="Engine batch size."),
    max_num_batched_tokens: int = common.BATCHED_OPT,
    peak_rps: float = typer.Option(None, "--peak-rps", help="Peak request rate of the whole fleet (req/s). "
                                   "Without it: the loads up to which Turbo is on, capped, off."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Replicas in the fleet."),
    kv_threshold: float = typer.Option(DEFAULT_KV_THRESHOLD, "--kv-threshold", help="KV utilization threshold."),
    lora: bool = typer.Option(False, "--lora/--no-lora", help="Are LoRA adapters hot-loaded on demand?"),
    http2: bool = typer.Option(True, "--http2/--no-http2", help="Do clients reuse HTTP/2 connections?"),
    knee_factor: float = common.KNEE_OPT,
    xlsx: Path = typer.Option(None, "--xlsx", help="Also write an Excel workbook with live formulas."),
    from_run: Path = common.RUN_OPT,
    as_json: bool = common.JSON_OPT,
) -> None:
    """Recommend Turbo on, Turbo capped or Standard only — with the reason of every rule.

    Without --peak-rps: the loads up to which Turbo is on, capped, off (the thresholds)."""

    def go() -> None:
        dep = hw.deployment()
        lm = latency_model(dep, prompt_tokens, max_tokens, batch_size, max_num_batched_tokens)
        cal = common.load_calibration(from_run, lm, replicas, knee_factor)
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
                common.print_report_json(th.to_dict(), cal)
                return
            common.console.print(thresholds_table(th, f"{dep.model.name} on {hw.tp}× {dep.gpu.name}"))
            if cal is not None:
                common.console.print(common.calibration_summary(cal))
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
                                                     hw.engine_profile)])
        if as_json:
            common.print_report_json(decision.to_dict(), cal, **({"xlsx": str(written)} if written is not None else {}),
                                     tp_choices=[c.to_dict() for c in tps])
            return
        common.console.print(decision_table(decision, replicas))
        if tps:
            common.console.print(tp_table(tps, hw.tp, dep.gpu.name))
        if cal is not None:
            common.console.print(common.calibration_summary(cal))
        if written is not None:
            common.console.print(f"workbook written: {written} (edit the inputs sheet; the matrix sheet recomputes)")

    common.run(go)
