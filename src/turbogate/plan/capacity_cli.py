"""``turbogate plan capacity``: weights, KV capacity, step times, saturation and predicted latency
against request rate (the shell; the numbers come from :mod:`turbogate.plan.capacity`)."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.table import Table

from turbogate.optgroup import expand
from turbogate.perf import GiB
from turbogate.plan import cli_common as common
from turbogate.plan.capacity import DEFAULT_BATCH_SIZES, CapacityReport, capacity
from turbogate.plan.latency import latency_model
from turbogate.plan.views import ms


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
        load.add_row(f"{p.rate:.2f}", f"{p.utilization:.0%}", f"{p.batch:.1f}", ms(p.ttft_s), ms(p.tpot_s), e2e,
                     f"{p.kv_utilization:.0%}", f"{rp.hbm_util:.0%}", f"{rp.naive_bw_util:.4f}")
    return [mem, dec, load]


@expand(hw=common.DEPLOYMENT_OPTIONS)
def capacity_cmd(
    hw: common.DeploymentArgs = common.HW,
    prompt_tokens: int = common.PROMPT_OPT,
    output_tokens: int = common.OUTPUT_OPT,
    max_num_seqs: int = common.SEQS_OPT,
    max_num_batched_tokens: int = common.BATCHED_OPT,
    rates: str = typer.Option(None, "--rates", help="Request rates (req/s, one replica), e.g. 1,5,10,17. "
                              "Default: 10 %–110 % of saturation."),
    batch_sizes: str = typer.Option(None, "--batch-sizes", help="Decode batch sizes to time, e.g. 1,16,64,256."),
    knee_factor: float = common.KNEE_OPT,
    replicas: int = typer.Option(1, "--replicas", min=1, help="Replicas behind the run given with --from-run."),
    from_run: Path = common.RUN_OPT,
    as_json: bool = common.JSON_OPT,
) -> None:
    """Weights, KV capacity, step times, saturation and predicted TTFT/TPOT against request rate."""

    def go() -> None:
        dep = hw.deployment()
        report = capacity(dep, prompt_tokens, output_tokens, max_num_seqs, max_num_batched_tokens,
                          rates=common.floats(rates, "--rates"),
                          batch_sizes=common.ints(batch_sizes, "--batch-sizes") or DEFAULT_BATCH_SIZES,
                          knee_factor=knee_factor)
        cal = None
        if from_run is not None:
            lm = latency_model(dep, prompt_tokens, output_tokens, max_num_seqs, max_num_batched_tokens)
            cal = common.load_calibration(from_run, lm, replicas, knee_factor)
        if as_json:
            common.print_report_json(report.to_dict(), cal)
            return
        for t in _capacity_tables(report):
            common.console.print(t)
        if cal is not None:
            common.console.print(common.calibration_summary(cal))
            common.console.print(common.calibration_table(cal))

    common.run(go)
