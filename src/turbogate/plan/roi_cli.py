"""``turbogate plan roi``: cost per tier and the ROI of Turbo per load band (the shell; the numbers
come from :mod:`turbogate.plan.roi`)."""

from __future__ import annotations

from pathlib import Path

import typer

from turbogate.optgroup import expand
from turbogate.plan import cli_common as common
from turbogate.plan.roi import RoiInputs, reuse_model, roi
from turbogate.plan.views import roi_table


@expand(hw=common.DEPLOYMENT_OPTIONS)
def roi_cmd(
    hw: common.DeploymentArgs = common.HW,
    prompt_tokens: int = common.PROMPT_OPT,
    output_tokens: int = common.OUTPUT_OPT,
    max_num_seqs: int = common.SEQS_OPT,
    max_num_batched_tokens: int = common.BATCHED_OPT,
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
    knee_factor: float = common.KNEE_OPT,
    from_run: Path = common.RUN_OPT,
    as_json: bool = common.JSON_OPT,
) -> None:
    """Cost per 1M tokens and per 1,000 requests per tier, and the ROI of Turbo per load band."""

    def go() -> None:
        dep = hw.deployment()
        inputs = RoiInputs(
            price_per_gpu_hour=dep.gpu.price_per_hour if price_per_hour is None else price_per_hour,
            gpus_per_replica=hw.tp, replicas=replicas, turbo_multiplier=turbo_multiplier,
            turbo_reservation=turbo_reservation, turbo_share=turbo_share, price_per_mtok=price_per_mtok,
            turbo_slo_ttft_s=turbo_slo_ttft, standard_slo_ttft_s=standard_slo_ttft, memory_reuse=memory_reuse,
            cold_start_s=cold_start_s, cold_starts_per_hour=cold_starts_per_hour, retry_decay=retry_decay,
            max_retries=max_retries, knee_factor=knee_factor,
        )
        lm = reuse_model(dep, prompt_tokens, output_tokens, memory_reuse, max_num_seqs, max_num_batched_tokens)
        cal = common.load_calibration(from_run, lm, replicas, knee_factor)
        knee = None if cal is None else cal.knee_per_replica
        report = roi(lm, inputs, loads=common.floats(loads, "--loads"),
                     tier_latency=None if cal is None else cal.tier_latency, knee_rps=knee,
                     knee_source="predicted" if knee is None else f"measured ({cal.kind if cal else ''})")
        if as_json:
            common.print_report_json(report.to_dict(), cal)
            return
        common.console.print(roi_table(report, measured=cal is not None))
        if cal is not None:
            common.console.print(common.calibration_summary(cal))

    common.run(go)
