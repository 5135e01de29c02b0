"""``--engine-profile`` and ``--gpu-profile``: the options plan, sim and emulate share, and what they do
to a deployment (the shell side: reading the GPU profile file)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from turbogate.perf import Deployment, deployment
from turbogate.perf.profiles import DEFAULT_PROFILE, ENGINE_PROFILES, get_profile

ENGINE_PROFILE_HELP = (f"Engine whose measured factors the model uses: {', '.join(ENGINE_PROFILES)} "
                       "(docs/plan.md lists each factor and where it comes from).")
GPU_PROFILE_HELP = ("A GPU profile written by `turbogate plan profile` on your own GPU: its measured bandwidth "
                    "efficiency and MFU replace the catalog's, and its GPU replaces the catalog GPU the command "
                    "would otherwise use.")


def engine_profile_option() -> str:
    return typer.Option(DEFAULT_PROFILE, "--engine-profile", help=ENGINE_PROFILE_HELP)  # type: ignore[no-any-return]


def gpu_profile_option() -> Path | None:
    return typer.Option(None, "--gpu-profile", help=GPU_PROFILE_HELP)  # type: ignore[no-any-return]


def profiled(dep: Deployment, engine_profile: str, gpu_profile: Path | None) -> Deployment:
    """``dep`` under the engine profile's factors, on the profiled GPU when a GPU profile is given."""
    from turbogate.plan.profile_cli import load_gpu_profile  # numpy only when a profile is read

    factors = get_profile(engine_profile).factors
    if gpu_profile is None:
        return replace(dep, factors=factors)
    gpu = load_gpu_profile(gpu_profile).gpu()
    return deployment(gpu, dep.model, tp=dep.tp, weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype,
                      gpu_mem_util=dep.gpu_mem_util, block_size=dep.block_size, factors=factors)
