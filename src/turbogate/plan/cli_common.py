"""What the ``turbogate plan`` commands share: their options, input parsing, JSON output and the
calibration tables a ``--from-run`` adds (the I/O shell; every number comes from the pure modules)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from turbogate.errors import BadInput, TurbogateError
from turbogate.optgroup import OptionGroup
from turbogate.perf import Deployment, deployment, get_gpu, resolve_model
from turbogate.perf.default_workload import OUTPUT_TOKENS, PROMPT_TOKENS
from turbogate.plan.calibrate import Calibration, calibrate, rel_error
from turbogate.plan.knee import DEFAULT_KNEE_FACTOR
from turbogate.plan.latency import LatencyModel
from turbogate.plan.profile_opts import engine_profile_option, gpu_profile_option, profiled
from turbogate.plan.views import ms

# Piped or captured output gets a wide console so the tables are not truncated to 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=200)

PROMPT_OPT = typer.Option(PROMPT_TOKENS, "--prompt-tokens", min=1, help="Prompt tokens per request.")
OUTPUT_OPT = typer.Option(OUTPUT_TOKENS, "--output-tokens", min=1, help="Output tokens per request.")
SEQS_OPT = typer.Option(256, "--max-num-seqs", min=1, help="Engine's max concurrent sequences (batch size).")
BATCHED_OPT = typer.Option(8192, "--max-num-batched-tokens", min=1, help="Engine's token budget per step.")
KNEE_OPT = typer.Option(DEFAULT_KNEE_FACTOR, "--knee-factor", help="Knee: mean E2E reaches this × its unloaded value.")
JSON_OPT = typer.Option(False, "--json", help="Print JSON instead of tables.")
RUN_OPT = typer.Option(None, "--from-run", help="A bench or sim run folder: use its measured knee and curves.")


@contextmanager
def clean_errors() -> Iterator[None]:
    """Bad input ends with one clear line on stderr and exit code 2, never a traceback."""
    try:
        yield
    except (TurbogateError, ValueError, FileNotFoundError) as exc:
        raise BadInput(str(exc), getattr(exc, "hint", None)) from exc  # one line, exit 2 (clierrors.py)


@dataclass(frozen=True, slots=True)
class DeploymentArgs:
    """The hardware, model and profile options ``plan capacity``, ``roi`` and ``matrix`` share."""

    gpu: str
    model: str
    tp: int
    dtype: str
    kv_dtype: str
    gpu_mem_util: float
    engine_profile: str
    gpu_profile: Path | None

    def deployment(self) -> Deployment:
        """The deployment, under the engine profile's factors and on the profiled GPU when one is given."""
        dep = deployment(get_gpu(self.gpu), resolve_model(self.model), tp=self.tp, weight_dtype=self.dtype,
                         kv_dtype=self.kv_dtype, gpu_mem_util=self.gpu_mem_util)
        return profiled(dep, self.engine_profile, self.gpu_profile)


#: A command's ``hw: DeploymentArgs = HW`` under ``@expand(hw=DEPLOYMENT_OPTIONS)`` (optgroup.py).
DEPLOYMENT_OPTIONS = OptionGroup(DeploymentArgs, {
    "gpu": (str, typer.Option("H100-SXM", "--gpu", help="GPU name (see `turbogate plan gpus`); case and punctuation "
                              "free.")),
    "model": (str, typer.Option("llama-3.1-8b", "--model", help="Catalog model (see `turbogate plan models`) or a path "
                                "to a Hugging Face config.json.")),
    "tp": (int, typer.Option(1, "--tp", min=1, help="Tensor-parallel GPUs per replica.")),
    "dtype": (str, typer.Option("bf16", "--dtype", help="Weight dtype: bf16, fp16, fp8, int8, int4, awq, gptq, "
                                "fp32.")),
    "kv_dtype": (str, typer.Option("auto", "--kv-dtype", help="KV-cache dtype (auto = as the weights, bf16 "
                                   "under 16 bits).")),
    "gpu_mem_util": (float, typer.Option(0.9, "--gpu-mem-util", help="Share of GPU memory the engine "
                                         "may use (vLLM's setting).")),
    "engine_profile": (str, engine_profile_option()),
    "gpu_profile": (Path | None, gpu_profile_option()),
})
HW = DEPLOYMENT_OPTIONS.marker


def floats(spec: str | None, name: str) -> list[float] | None:
    if spec is None or not spec.strip():
        return None
    try:
        values = [float(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated numbers, got {spec!r}") from None
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ValueError(f"{name} must be finite numbers >= 0")
    return values


def ints(spec: str | None, name: str) -> list[int] | None:
    vals = floats(spec, name)
    if vals is None:
        return None
    if any(v < 1 or v != int(v) for v in vals):
        raise ValueError(f"{name} must be whole numbers >= 1")
    return [int(v) for v in vals]


def clean_json(obj: Any) -> Any:
    """JSON-safe: inf and NaN become null."""
    if isinstance(obj, float):
        return None if math.isinf(obj) or math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {k: clean_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean_json(v) for v in obj]
    return obj


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(clean_json(obj), indent=2))


def pct(x: float | None) -> str:
    return "—" if x is None or math.isinf(x) else f"{round(x, 3) or 0.0:+.1%}"  # never "-0.0%"


def load_calibration(run_dir: Path | None, model: LatencyModel, replicas: int,
                     knee_factor: float) -> Calibration | None:
    """``model`` set beside the run at ``run_dir`` (``--from-run``); None without one."""
    if run_dir is None:
        return None
    from turbogate.results import load_run

    run = load_run(run_dir, with_requests=False, with_samples=False)
    return calibrate(run.summary, model, replicas=replicas, knee_factor=knee_factor)


def print_report_json(report: dict[str, Any], cal: Calibration | None, **extra: Any) -> None:
    """A command's report as JSON, with the calibration a ``--from-run`` added and ``extra`` keys."""
    print_json({**report, **({"calibration": cal.to_dict()} if cal is not None else {}), **extra})


def calibration_table(cal: Calibration) -> Table:
    t = Table(title=f"Predicted vs measured ({cal.kind} run, {cal.replicas} replica(s))")
    for col in ("offered req/s", "TTFT pred ms", "TTFT meas ms", "err", "TPOT pred ms", "TPOT meas ms", "err",
                "achieved pred", "achieved meas", "err"):
        t.add_column(col, justify="right")
    for p in cal.points:
        t.add_row(f"{p.offered_rps:.2f}", ms(p.predicted_ttft_s), ms(p.measured_ttft_s),
                  pct(rel_error(p.predicted_ttft_s, p.measured_ttft_s)), ms(p.predicted_tpot_s),
                  ms(p.measured_tpot_s), pct(rel_error(p.predicted_tpot_s, p.measured_tpot_s)),
                  f"{p.predicted_achieved_rps:.2f}", f"{p.measured_achieved_rps:.2f}",
                  pct(rel_error(p.predicted_achieved_rps, p.measured_achieved_rps)))
    return t


def calibration_summary(cal: Calibration) -> Table:
    t = Table(title="Knee and saturation (fleet req/s)")
    for col in ("quantity", "predicted", "measured", "error"):
        t.add_column(col, justify="right")
    mk = "—" if cal.measured_knee_rps is None else f"{cal.measured_knee_rps:.2f} ({cal.knee_method})"
    t.add_row("knee", f"{cal.predicted_knee_rps:.2f}", mk,
              pct(rel_error(cal.predicted_knee_rps, cal.measured_knee_rps)))
    t.add_row("saturation / max achieved", f"{cal.predicted_saturation_rps:.2f}", f"{cal.measured_max_rps:.2f}",
              pct(rel_error(cal.predicted_saturation_rps, cal.measured_max_rps)))
    return t


def run(fn: Callable[[], None]) -> None:
    with clean_errors():
        fn()
