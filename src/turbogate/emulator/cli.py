"""``turbogate emulate``: an OpenAI-compatible engine emulator with vLLM's metric names."""

from __future__ import annotations

import json
import logging
from enum import StrEnum
from pathlib import Path

import typer

from turbogate.errors import BadInput, TurbogateError
from turbogate.plan.profile_opts import engine_profile_option, gpu_profile_option, profiled


class SchedulingPolicy(StrEnum):
    fcfs = "fcfs"
    priority = "priority"


def emulate(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8001, "--port", help="Port to listen on."),
    gpu: str = typer.Option("H100-SXM", "--gpu", help="GPU from the catalog (H100-SXM, A100-80G-SXM, L4, ...)."),
    model: str = typer.Option("llama-3.1-8b", "--model",
                              help="Catalog model name, or a path to a Hugging Face config.json / model folder."),
    tp: int = typer.Option(1, "--tp", "--tensor-parallel-size", min=1, help="Tensor-parallel degree (GPUs)."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", min=1, help="Most sequences in one batch (vLLM)."),
    max_num_batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens", min=1,
                                               help="Token budget of one engine step; longer prefills are chunked."),
    scheduling_policy: SchedulingPolicy = typer.Option(
        SchedulingPolicy.fcfs, "--scheduling-policy",
        help="fcfs, or priority: the request body's 'priority' (lower first), arrival breaks ties."),
    num_gpu_blocks: int | None = typer.Option(
        None, "--num-gpu-blocks", "--num-gpu-blocks-override", min=1,
        help="KV-cache blocks of 16 tokens (default: what the GPU memory leaves); small values make a replica "
             "that saturates and preempts."),
    dtype: str = typer.Option("bf16", "--dtype", help="Weight dtype: bf16, fp16, fp8, int8, int4."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype",
                                       help="KV-cache dtype: auto (bf16 under fp8/int weights, else the weight dtype), "
                                            "bf16, fp8."),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", min=0.05, max=1.0,
                                                 help="Fraction of GPU memory for weights + KV cache."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", min=1,
                                             help="Context limit (default: the model's, capped by the KV cache)."),
    served_model_name: list[str] | None = typer.Option(
        None, "--served-model-name", help="Name(s) clients use in 'model' (default: --model as given). Repeatable."),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer",
        help="tokenizer.json (or its folder) to count prompt tokens with the 'tokenizers' package; "
             "default: about 4 characters per token."),
    time_scale: float = typer.Option(1.0, "--time-scale", min=0.0,
                                     help="1.0 = real GPU speed, 0.1 = ten times faster, 0 = instant."),
    seed: int = typer.Option(0, "--seed", help="Seed for output text, output lengths and fault draws."),
    error_rate: float = typer.Option(0.0, "--error-rate", min=0.0, max=1.0,
                                     help="Fraction of completion requests answered with HTTP 500."),
    hang_rate: float = typer.Option(0.0, "--hang-rate", min=0.0, max=1.0,
                                    help="Fraction of completion requests never answered (until the client gives up)."),
    crash_after: int | None = typer.Option(None, "--crash-after", min=1,
                                           help="Exit the process (code 3) after answering N completion requests."),
    startup_delay: float = typer.Option(0.0, "--startup-delay", min=0.0,
                                        help="Seconds during which /health answers 503, like a loading model."),
    crash_mid_stream: bool = typer.Option(
        False, "--crash-mid-stream", help="Exit the process (code 3) once the first stream has sent its first token."),
    metrics_delay: float = typer.Option(0.0, "--metrics-delay", min=0.0,
                                        help="Seconds /metrics waits before answering (a slow metrics endpoint)."),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn log level."),
    calibrate_from: Path | None = typer.Option(
        None, "--calibrate-from", exists=True, file_okay=False, dir_okay=True,
        help="A bench run folder of a real engine (streamed): fit the step time (per step, per sequence, per "
             "prompt token) to its inter-token gaps and emulate that engine; give it the engine's --max-num-seqs. "
             "The fit is printed as one JSON line on stderr (docs/engines.md)."),
    engine_profile: str = engine_profile_option(),
    gpu_profile: Path | None = gpu_profile_option(),
) -> None:
    """Run an OpenAI-compatible engine emulator (vLLM-shaped scheduler, roofline timing)."""
    from turbogate.emulator.server import build_app, run_server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        fit = None
        if calibrate_from is not None:
            from turbogate.emulator.calibrate import fit_from_run

            fit = fit_from_run(calibrate_from)
            typer.echo(json.dumps({"calibrated_from": str(calibrate_from), **fit.to_dict()}), err=True)
        app = build_app(step_fit=fit,
            gpu=gpu, model=model, tp=tp, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            policy=scheduling_policy.value, num_gpu_blocks=num_gpu_blocks, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
            gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
            served_model_names=served_model_name or [model], tokenizer=tokenizer, time_scale=time_scale, seed=seed,
            error_rate=error_rate, hang_rate=hang_rate, crash_after=crash_after, startup_delay=startup_delay,
            crash_mid_stream=crash_mid_stream, metrics_delay=metrics_delay,
            profile=lambda dep: profiled(dep, engine_profile, gpu_profile),
            engine_profile=engine_profile,
        )
    except (TurbogateError, ValueError, RuntimeError, FileNotFoundError) as exc:
        raise BadInput(str(exc), exc.hint if isinstance(exc, TurbogateError) else None) from exc  # one line, exit 2
    run_server(app, host, port, log_level)
