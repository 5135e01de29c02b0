"""``turbogate plan burst``: N requests at once, answered by the stepped engine in virtual time.

The closed form (``plan capacity``) assumes a steady state; a finite burst starts in lock-step and
drains at the end, so its throughput and latencies are the stepped engine's to answer
(``plan/replay.py``).  The steady-state figures are printed beside it for comparison.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import typer

from turbogate.engine.profiled import profile_config
from turbogate.errors import BadInput, TurbogateError
from turbogate.perf import deployment, get_gpu, resolve_model, saturation
from turbogate.plan.profile_opts import engine_profile_option, gpu_profile_option, profiled
from turbogate.plan.replay import burst
from turbogate.results.percentile import percentile


def burst_cmd(
    requests: int = typer.Option(..., "--requests", min=1, help="Requests sent at once."),
    gpu: str = typer.Option("H100-SXM", "--gpu", help="GPU name (see `turbogate plan gpus`)."),
    model: str = typer.Option("llama-3.1-8b", "--model", help="Catalog model or a config.json path."),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel GPUs per replica."),
    dtype: str = typer.Option("bf16", "--dtype", help="Weight dtype."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV-cache dtype (auto = as the weights)."),
    gpu_mem_util: float = typer.Option(0.9, "--gpu-mem-util", help="Share of GPU memory the engine may use."),
    prompt_tokens: int = typer.Option(512, "--prompt-tokens", min=1, help="Prompt tokens per request."),
    output_tokens: int = typer.Option(256, "--output-tokens", min=1, help="Output tokens per request."),
    max_num_seqs: int = typer.Option(None, "--max-num-seqs", min=1, help="Engine's max running requests "
                                     "(default: the engine profile's)."),
    max_num_batched_tokens: int = typer.Option(None, "--max-num-batched-tokens", min=1,
                                               help="Token budget per step (default: the engine profile's)."),
    engine_profile: str = engine_profile_option(),
    gpu_profile: Path | None = gpu_profile_option(),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """How long N requests sent at once take, and their TTFT, TPOT and E2E (stepped engine, virtual time)."""
    from turbogate.perf.profiles import get_profile

    try:
        prof = get_profile(engine_profile)
        dep = profiled(deployment(get_gpu(gpu), resolve_model(model), tp=tp, weight_dtype=dtype, kv_dtype=kv_dtype,
                                  gpu_mem_util=gpu_mem_util), engine_profile, gpu_profile)
        config = profile_config(prof, max_num_seqs, max_num_batched_tokens)
        run = burst(dep, config, requests, prompt_tokens, output_tokens)
        steady = saturation(dep, prompt_tokens, output_tokens, config.max_num_seqs, config.max_num_batched_tokens)
    except (TurbogateError, ValueError) as exc:
        raise BadInput(str(exc), getattr(exc, "hint", None)) from None  # one line, exit 2 (clierrors.py)
    ttfts = [t.ttft for t in run.timings]
    out: dict[str, Any] = {
        "requests": requests, "engine_profile": prof.name, "gpu": dep.gpu.name, "model": dep.model.name, "tp": tp,
        "makespan_s": run.duration, "output_tokens_per_s": run.output_tokens_per_s,
        "ttft_mean_s": statistics.fmean(ttfts), "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p99_s": percentile(ttfts, 99),
        "tpot_mean_s": run.tpot("mean"), "e2e_mean_s": run.e2e("mean"), "preemptions": run.preemptions,
        "steady_state_output_tokens_per_s": steady.output_tokens_per_s,
    }
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(f"{requests} × {prompt_tokens}/{output_tokens} tokens at once on {tp}× {dep.gpu.name}, "
               f"{dep.model.name}, engine profile {prof.name}:")
    typer.echo(f"  all done after {out['makespan_s']:.2f} s: {out['output_tokens_per_s']:,.0f} output tokens/s "
               f"(steady state would give {steady.output_tokens_per_s:,.0f})")
    typer.echo(f"  TTFT mean {out['ttft_mean_s'] * 1000:.0f} ms, p50 {out['ttft_p50_s'] * 1000:.0f} ms, "
               f"p99 {out['ttft_p99_s'] * 1000:.0f} ms; TPOT mean {out['tpot_mean_s'] * 1000:.2f} ms; "
               f"E2E mean {out['e2e_mean_s']:.2f} s; preemptions {run.preemptions}")
