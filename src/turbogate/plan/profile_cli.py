"""``turbogate plan profile``: time the microbenchmarks the perf model needs and write a GPU profile.

The shell around :mod:`turbogate.plan.profile` (which holds the arithmetic).  With PyTorch and a CUDA
GPU (``pip install 'turbogate[torch]'``) it times, at the model's real shapes with random weights:
a large copy (HBM bandwidth ceiling), weight-streaming GEMMs by row count, a large GEMM, and whole
decode and prefill steps (every layer's GEMMs and attention over a KV cache; one layer's weights
reused for every layer, each far larger than the L2 cache).  ``--tiny`` runs the same code at tiny
shapes on the CPU (numpy, float32) so that CI checks the pipeline end to end without a GPU.
"""

from __future__ import annotations

import datetime
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import typer

from turbogate.errors import BadInput, TurbogateError
from turbogate.perf import GPU, Deployment, ModelSpec, get_gpu, resolve_model
from turbogate.plan.profile import STREAM_ROWS, GpuProfile, GpuProfileError, StepRow, efficiencies, profile_from_dict

TINY_MODEL = ModelSpec("tiny", n_layers=2, hidden_size=256, n_heads=4, n_kv_heads=2, head_dim=64,
                       intermediate_size=512, vocab_size=1024, max_context=2048)
GPU_NAMES = {"h100": "H100-SXM", "h200": "H200", "a100": "A100-80G-SXM", "b200": "B200", "l40s": "L40S",
             "l4": "L4", "a10": "A10G", "gh200": "GH200", "h100 nvl": "H100-NVL", "mi300x": "MI300X"}


class _Backend:
    """numpy on the CPU; the torch subclass swaps arrays and timing for CUDA's."""

    name = "numpy-cpu"
    device = "cpu"

    def __init__(self, reps: int) -> None:
        self.reps = reps
        self.rng = np.random.default_rng(0)

    def randn(self, *shape: int) -> Any:
        return self.rng.standard_normal(shape, dtype=np.float32)

    def mm(self, a: Any, b: Any) -> Any:
        return a @ b

    def softmax(self, x: Any) -> Any:
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def copy(self, x: Any) -> Any:
        return x.copy()

    def sync(self) -> None:
        return None

    def time(self, fn: Callable[[], Any]) -> float:
        fn()  # warm-up
        self.sync()
        samples = []
        for _ in range(self.reps):
            t0 = time.perf_counter()
            fn()
            self.sync()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    @property
    def element_bytes(self) -> float:
        return 4.0


class _TorchBackend(_Backend):
    def __init__(self, reps: int, dtype: str) -> None:
        import torch  # the optional extra: pip install 'turbogate[torch]'

        super().__init__(reps)
        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.dev = "cuda" if self.cuda else "cpu"
        self.name = "torch-cuda" if self.cuda else "torch-cpu"
        self.device = torch.cuda.get_device_name(0) if self.cuda else "cpu"
        self.dtype = torch.bfloat16 if dtype == "bf16" else torch.float16
        torch.manual_seed(0)

    def randn(self, *shape: int) -> Any:
        return self.torch.randn(*shape, device=self.dev, dtype=self.dtype)

    def softmax(self, x: Any) -> Any:
        return self.torch.softmax(x, dim=-1)

    def copy(self, x: Any) -> Any:
        return x.clone()

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    @property
    def element_bytes(self) -> float:
        return 2.0


def _layer(b: _Backend, m: ModelSpec) -> dict[str, Any]:
    q_out = (m.n_heads + 2 * m.n_kv_heads) * m.head_dim
    return {"qkv": b.randn(m.hidden_size, q_out), "o": b.randn(m.n_heads * m.head_dim, m.hidden_size),
            "up": b.randn(m.hidden_size, 2 * m.intermediate_size), "down": b.randn(m.intermediate_size, m.hidden_size)}


def _step(b: _Backend, m: ModelSpec, w: dict[str, Any], x: Any, q: Any, kt: Any, v: Any) -> Any:
    """All layers of one step on token rows ``x``: queries ``q`` attend over ``kt`` (K transposed) and ``v``."""
    rows = x.shape[0]
    for _ in range(m.n_layers):
        b.mm(x, w["qkv"])
        attn = b.mm(b.softmax(b.mm(q, kt)), v).reshape(rows, m.n_heads * m.head_dim)
        b.mm(attn, w["o"])
        b.mm(b.mm(x, w["up"])[:, : m.intermediate_size], w["down"])
    return x


def _attention_inputs(b: _Backend, m: ModelSpec, seqs: int, queries: int, ctx: int) -> tuple[Any, Any, Any]:
    """Queries grouped by KV head (GQA), K transposed and V of a KV cache of ``ctx`` tokens per sequence."""
    group = m.n_heads // m.n_kv_heads
    q = b.randn(seqs, m.n_kv_heads, group * queries, m.head_dim)
    return q, b.randn(seqs, m.n_kv_heads, m.head_dim, ctx), b.randn(seqs, m.n_kv_heads, ctx, m.head_dim)


def _measure(b: _Backend, m: ModelSpec, tiny: bool, progress: Callable[[str], None]) -> tuple[dict[str, float],
                                                                                             list[tuple[str, int, int,
                                                                                                        float]]]:
    eb = b.element_bytes
    big = (1 << 20) if tiny else (1 << 30)  # elements: a copy far larger than any cache
    buf = b.randn(big)
    measured = {"big_read_bytes_per_s": 2 * big * eb / b.time(lambda: b.copy(buf))}
    progress("copy")
    w = b.randn(m.hidden_size, m.intermediate_size * 2)
    for rows in (1, 4, STREAM_ROWS, 64):
        x = b.randn(rows, m.hidden_size)
        weight_bytes = m.hidden_size * m.intermediate_size * 2 * eb
        measured[f"gemm_{rows}_rows_bytes_per_s"] = weight_bytes / b.time(partial(b.mm, x, w))
    progress("weight-streaming GEMMs")
    n = 512 if tiny else 8192
    a, c = b.randn(n, n), b.randn(n, n)
    measured["big_gemm_flops"] = 2.0 * n**3 / b.time(lambda: b.mm(a, c))
    progress("large GEMM")
    layer = _layer(b, m)
    steps: list[tuple[str, int, int, float]] = []
    for batch, ctx in ((1, 128), (16, 512), (64, 512)) if tiny else ((1, 1024), (16, 1024), (64, 1024),
                                                                      (128, 1024), (256, 1024)):
        q, kt, v = _attention_inputs(b, m, batch, 1, ctx)
        x = b.randn(batch, m.hidden_size)
        steps.append(("decode", batch, ctx, b.time(partial(_step, b, m, layer, x, q, kt, v))))
    progress("decode steps")
    prefill_flops = 0.0
    for tokens in (64, 256) if tiny else (512, 2048, 8192):
        q, kt, v = _attention_inputs(b, m, 1, tokens, tokens)
        x = b.randn(tokens, m.hidden_size)
        seconds = b.time(partial(_step, b, m, layer, x, q, kt, v))
        steps.append(("prefill", tokens, 0, seconds))
        gemm = 2.0 * tokens * m.n_layers * (m.attention_params_per_layer + m.expert_params_per_layer)
        attention = 4.0 * m.n_layers * m.n_heads * m.head_dim * tokens * tokens
        prefill_flops = (gemm + attention) / seconds  # the largest prompt's rate counts
    measured["prefill_flops"] = prefill_flops
    progress("prefill steps")
    return measured, steps


def _catalog_gpu(device: str) -> str | None:
    name = device.lower()
    for key in sorted(GPU_NAMES, key=len, reverse=True):
        if key in name:
            return GPU_NAMES[key]
    return None


def build_profile(backend: _Backend, gpu: GPU, model: ModelSpec, dtype: str, tiny: bool, datasheet: bool,
                  progress: Callable[[str], None]) -> GpuProfile:
    measured, steps = _measure(backend, model, tiny, progress)
    bw, mfu = efficiencies(gpu, dtype, measured, datasheet)
    created = datetime.date.today().isoformat()
    draft = GpuProfile(gpu.name, backend.device, backend.name, dtype, tiny, created, bw, mfu, measured,
                       model=model.name)
    before = _deployment_for(gpu, model, dtype)
    after = _deployment_for(draft.gpu(), model, dtype)
    rows = tuple(StepRow(kind, tokens, ctx, secs, _predict(before, kind, tokens, ctx),
                         _predict(after, kind, tokens, ctx)) for kind, tokens, ctx, secs in steps)
    return GpuProfile(gpu.name, backend.device, backend.name, dtype, tiny, created, bw, mfu, measured, rows, model.name)


def _deployment_for(gpu: GPU, model: ModelSpec, dtype: str) -> Deployment:
    return Deployment(gpu, model, weight_dtype=dtype)  # timing only: memory fit is not the question here


def _predict(dep: Deployment, kind: str, tokens: int, ctx: int) -> float:
    if kind == "decode":
        return dep.decode_step_time(tokens, tokens * ctx)
    return dep.prefill_time(tokens)


def load_gpu_profile(path: Path) -> GpuProfile:
    try:
        return profile_from_dict(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise GpuProfileError(f"--gpu-profile: no such file {path}") from None
    except json.JSONDecodeError as exc:
        raise GpuProfileError(f"--gpu-profile: {path} is not JSON: {exc}") from None


def profile_cmd(
    out: Path = typer.Option(..., "--out", help="Write the GPU profile (JSON) here."),
    tiny: bool = typer.Option(False, "--tiny", help="Tiny shapes on the CPU (numpy): checks the pipeline, e.g. in "
                              "CI; the file does not describe a GPU to plan on."),
    gpu: str = typer.Option(None, "--gpu", help="Catalog GPU the profile refines (default: from the device name; "
                            "H100-SXM with --tiny)."),
    model: str = typer.Option("llama-3.1-8b", "--model", help="Model whose real shapes are timed (random weights)."),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16 or fp16 (the GEMMs' dtype on the GPU)."),
    reps: int = typer.Option(5, "--reps", min=1, help="Timed repetitions per microbenchmark (the median counts)."),
) -> None:
    """Measure this machine's GPU for the perf model and write a profile that `plan capacity`, `sim` and
    `emulate` take with --gpu-profile. Needs PyTorch with CUDA (pip install 'turbogate[torch]') unless --tiny."""
    try:
        if tiny:
            backend: _Backend = _Backend(reps)
            spec = TINY_MODEL
        else:
            try:
                backend = _TorchBackend(reps, dtype)
            except ImportError:
                raise GpuProfileError("plan profile needs PyTorch: pip install 'turbogate[torch]' "
                                      "(or --tiny for the CPU pipeline check)") from None
            if backend.name != "torch-cuda":
                raise GpuProfileError("plan profile found no CUDA GPU; use --tiny for the CPU pipeline check")
            spec = resolve_model(model)
        name = gpu or _catalog_gpu(backend.device) or ("H100-SXM" if tiny else None)
        if name is None:
            raise GpuProfileError(f"device {backend.device!r} is not in the catalog: name one with --gpu")
        catalog = get_gpu(name)
        datasheet = backend.name == "torch-cuda"

        def progress(what: str) -> None:
            typer.echo(f"plan profile: {what} done", err=True)

        prof = build_profile(backend, catalog, spec, dtype, tiny, datasheet, progress)
        Path(out).write_text(json.dumps(prof.to_dict(), indent=2) + "\n")
        typer.echo(f"wrote {out}: {prof.gpu_name} on {prof.device} ({prof.backend}), bw_efficiency "
                   f"{prof.bw_efficiency:.3f}, mfu {prof.mfu:.3f}")
    except (TurbogateError, ValueError, OSError) as exc:
        raise BadInput(str(exc), getattr(exc, "hint", None)) from None  # one line, exit 2 (clierrors.py)
