"""One performance model: hardware and model catalogs plus a roofline engine step model.

Pure functions and frozen values; no I/O except :func:`load_hf_config`, which reads one file.
The emulator (real time), the simulator (virtual time) and the planner (closed form) all use it.
"""

from turbogate.perf.capacity import Saturation, avg_kv_tokens_per_seq, saturation
from turbogate.perf.hardware import GPU, GPUS, GiB, get_gpu
from turbogate.perf.models import MODELS, ModelSpec, get_model, load_hf_config, model_from_hf_config, resolve_model
from turbogate.perf.roofline import (
    DTYPE_BYTES,
    Deployment,
    PerfFactors,
    deployment,
    dtype_bytes,
    kv_bytes_per_token,
    weights_bytes,
)

__all__ = [
    "DTYPE_BYTES",
    "GPU",
    "GPUS",
    "MODELS",
    "Deployment",
    "GiB",
    "ModelSpec",
    "PerfFactors",
    "Saturation",
    "avg_kv_tokens_per_seq",
    "deployment",
    "dtype_bytes",
    "get_gpu",
    "get_model",
    "kv_bytes_per_token",
    "load_hf_config",
    "model_from_hf_config",
    "resolve_model",
    "saturation",
    "weights_bytes",
]
