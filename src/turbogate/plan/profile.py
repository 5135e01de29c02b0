"""A GPU profile: what the perf model needs, measured on the user's own GPU (pure: data and arithmetic).

``turbogate plan profile`` (``plan/profile_cli.py``) times microbenchmarks on the machine it runs on
and builds a :class:`GpuProfile` from them here; ``--gpu-profile FILE`` on ``plan capacity``, ``sim``
and ``emulate`` reads it back (:func:`profile_from_dict`) and runs the model on :meth:`GpuProfile.gpu`:
the catalog GPU it refines, with its measured bandwidth efficiency and MFU in place of the catalog's.

The two measured factors:

* ``bw_efficiency``: weight bytes per second a GEMM of :data:`STREAM_ROWS` rows streams (decode at a
  small batch is exactly that), over the GPU's datasheet bandwidth;
* ``mfu``: FLOPs per second of a whole prefill step at the model's real shapes (every layer's GEMMs
  and attention), over the datasheet dense FLOP/s of the dtype.

On a device the catalog does not know (the CPU backend of ``--tiny``), the ceilings are the
device's own measured ones (a large copy, a large GEMM) instead of a datasheet's: the file then
tests the pipeline, it does not describe a GPU to plan on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from turbogate.errors import TurbogateError
from turbogate.perf import GPU, get_gpu

PROFILE_FORMAT = 1
STREAM_ROWS = 16  # decode batch whose GEMMs still stream the weights (measured flat up to 16 rows on H200)


class GpuProfileError(TurbogateError, ValueError):
    """A GPU profile file that cannot be read or does not hold what the model needs."""


@dataclass(frozen=True, slots=True)
class StepRow:
    """One timed step at the model's shapes beside the model's prediction of it."""

    kind: str  # "decode" or "prefill"
    tokens: int  # decode: batch size; prefill: prompt tokens
    context: int  # KV tokens per sequence read (decode) or 0
    measured_s: float
    predicted_s: float  # the model before the profile (catalog factors)
    predicted_with_profile_s: float

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True, slots=True)
class GpuProfile:
    gpu_name: str  # the catalog GPU it refines
    device: str  # what the backend reported (torch.cuda.get_device_name, or "cpu")
    backend: str  # "torch-cuda", "torch-cpu" or "numpy-cpu"
    dtype: str
    tiny: bool
    created: str  # ISO date the caller passes in
    bw_efficiency: float
    mfu: float
    measured: dict[str, float]  # every microbenchmark's figure, by name (bytes/s, FLOP/s, seconds)
    steps: tuple[StepRow, ...] = field(default_factory=tuple)
    model: str = ""

    def gpu(self) -> GPU:
        """The catalog GPU with the measured efficiencies in place of its own."""
        return replace(get_gpu(self.gpu_name), bw_efficiency=self.bw_efficiency, mfu=self.mfu,
                       source=f"{get_gpu(self.gpu_name).source}; bw_efficiency and mfu measured ({self.backend}, "
                              f"{self.device}, {self.created})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PROFILE_FORMAT, "gpu": self.gpu_name, "device": self.device, "backend": self.backend,
            "dtype": self.dtype, "tiny": self.tiny, "created": self.created, "model": self.model,
            "bw_efficiency": self.bw_efficiency, "mfu": self.mfu, "measured": dict(self.measured),
            "steps": [{"kind": r.kind, "tokens": r.tokens, "context": r.context, "measured_s": r.measured_s,
                       "predicted_s": r.predicted_s, "predicted_with_profile_s": r.predicted_with_profile_s,
                       "error": round(r.error, 4)} for r in self.steps],
        }


def _unit(value: Any, name: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise GpuProfileError(f"GPU profile field {name!r} must be a number, got {value!r}") from None
    if not 0.0 < x <= 1.0:
        raise GpuProfileError(f"GPU profile field {name!r} must be in (0, 1], got {x}")
    return x


def profile_from_dict(data: Any) -> GpuProfile:
    """Parse a profile file's JSON object, naming the field that is wrong."""
    if not isinstance(data, dict):
        raise GpuProfileError("GPU profile must be a JSON object")
    if data.get("format") != PROFILE_FORMAT:
        raise GpuProfileError(f"GPU profile format {data.get('format')!r} is not {PROFILE_FORMAT}")
    for key in ("gpu", "device", "backend", "bw_efficiency", "mfu"):
        if key not in data:
            raise GpuProfileError(f"GPU profile lacks field {key!r}")
    try:
        get_gpu(str(data["gpu"]))
    except TurbogateError as exc:
        raise GpuProfileError(f"GPU profile field 'gpu': {exc}") from None
    steps = tuple(StepRow(str(r["kind"]), int(r["tokens"]), int(r["context"]), float(r["measured_s"]),
                          float(r["predicted_s"]), float(r["predicted_with_profile_s"]))
                  for r in data.get("steps", []))
    measured = data.get("measured", {})
    if not isinstance(measured, dict):
        raise GpuProfileError("GPU profile field 'measured' must be an object")
    return GpuProfile(gpu_name=get_gpu(str(data["gpu"])).name, device=str(data["device"]),
                      backend=str(data["backend"]), dtype=str(data.get("dtype", "bf16")),
                      tiny=bool(data.get("tiny", False)), created=str(data.get("created", "")),
                      bw_efficiency=_unit(data["bw_efficiency"], "bw_efficiency"), mfu=_unit(data["mfu"], "mfu"),
                      measured={str(k): float(v) for k, v in measured.items()}, steps=steps,
                      model=str(data.get("model", "")))


def efficiencies(gpu: GPU, dtype: str, measured: dict[str, float], datasheet: bool) -> tuple[float, float]:
    """(bw_efficiency, mfu) from the microbenchmarks: against the datasheet on a catalog GPU, else
    against the device's own measured ceilings (``big_read_bytes_per_s``, ``big_gemm_flops``)."""
    bandwidth = gpu.hbm_bandwidth if datasheet else measured["big_read_bytes_per_s"]
    flops = gpu.flops_for(dtype) if datasheet else measured["big_gemm_flops"]
    bw = measured[f"gemm_{STREAM_ROWS}_rows_bytes_per_s"] / bandwidth
    mfu = measured["prefill_flops"] / flops
    return min(1.0, max(1e-6, bw)), min(1.0, max(1e-6, mfu))
