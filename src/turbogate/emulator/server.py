"""Assemble the emulator from options and serve it with uvicorn (httptools + uvloop)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import uvicorn

from turbogate.emulator.app import EmulatorApp, EmulatorSettings, Faults
from turbogate.emulator.calibrate import StepFit, factors_for
from turbogate.emulator.tokens import make_counter
from turbogate.engine import Engine, Policy
from turbogate.engine.profiled import profile_config
from turbogate.perf import Deployment, deployment, get_gpu, resolve_model
from turbogate.perf.profiles import DEFAULT_PROFILE, EngineProfile

log = logging.getLogger("turbogate.emulator")


def build_app(*, gpu: str, model: str, tp: int = 1, max_num_seqs: int = 256, max_num_batched_tokens: int = 8192,
              policy: Policy = "fcfs", num_gpu_blocks: int | None = None, dtype: str = "bf16",
              kv_cache_dtype: str = "auto", gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
              served_model_names: list[str] | None = None, tokenizer: str | None = None, time_scale: float = 1.0,
              seed: int = 0, error_rate: float = 0.0, hang_rate: float = 0.0, crash_after: int | None = None,
              startup_delay: float = 0.0, crash_mid_stream: bool = False,
              metrics_delay: float = 0.0, step_fit: StepFit | None = None,
              profile: Callable[[Deployment], Deployment] | None = None,
              engine_profile: EngineProfile | str = DEFAULT_PROFILE) -> EmulatorApp:
    """``profile`` sets the deployment's factors; ``engine_profile`` the scheduling its engine runs
    (give both the same engine profile: ``emulate --engine-profile``)."""
    spec = resolve_model(model)
    dep = deployment(get_gpu(gpu), spec, tp=tp, weight_dtype=dtype, kv_dtype=kv_cache_dtype,
                     gpu_mem_util=gpu_memory_utilization)
    if profile is not None:  # --engine-profile / --gpu-profile
        dep = profile(dep)
    if step_fit is not None:  # --calibrate-from: a real engine's measured step time, not the roofline's
        dep = replace(dep, factors=factors_for(dep, step_fit))
    engine = Engine(dep, profile_config(engine_profile, max_num_seqs, max_num_batched_tokens, policy=policy,
                                        num_gpu_blocks=num_gpu_blocks))
    kv_tokens = engine.max_tokens_per_request
    limit = min(spec.max_context, kv_tokens)
    if max_model_len is not None:
        if max_model_len > kv_tokens:
            raise ValueError(f"--max-model-len {max_model_len} exceeds the KV cache ({kv_tokens} tokens)")
        limit = max_model_len
    settings = EmulatorSettings(
        served_model_names=served_model_names or [model],
        max_model_len=limit,
        seed=seed,
        faults=Faults(error_rate, hang_rate, crash_after, startup_delay, crash_mid_stream, metrics_delay),
    )
    counter = make_counter(tokenizer)
    log.info("emulating %s on %d× %s: %d KV blocks (%d tokens), max_model_len %d, %s, policy %s, time scale %g, "
             "prompt tokens by %s", spec.name, tp, dep.gpu.name, engine.blocks.num_blocks, kv_tokens, limit, dtype,
             policy, time_scale, counter.name)
    return EmulatorApp(engine, counter, settings, time_scale)


def run_server(app: EmulatorApp, host: str, port: int, log_level: str = "warning") -> None:
    config = uvicorn.Config(app, host=host, port=port, loop="uvloop", http="httptools", lifespan="on",
                            access_log=False, log_level=log_level, timeout_graceful_shutdown=2,
                            backlog=4096, proxy_headers=False, server_header=False, date_header=False)
    uvicorn.Server(config).run()
