"""Map the metric names of each engine kind onto one ``ReplicaLoad`` (pure).

The shell parses ``/metrics`` text with prometheus_client's parser and sums each sample name
over its label sets into a ``{name: value}`` mapping; this module only reads that mapping, so
it needs no I/O and no Prometheus library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ENGINE_KINDS: tuple[str, ...] = ("vllm", "sglang", "tgi", "llamacpp", "openai", "emulator")


#: Samples kept apart by one label instead of summed: sample name → that label.  Their key in the samples
#: mapping is ``name{label="value"}`` (see :func:`sample_key`).
SPLIT_BY_LABEL: dict[str, str] = {"vllm:num_requests_waiting_by_reason": "reason"}
WAITING_FOR_CAPACITY = 'vllm:num_requests_waiting_by_reason{reason="capacity"}'


def sample_key(name: str, labels: Mapping[str, str]) -> str:
    """The key a sample is summed under: its name, or ``name{label="value"}`` for :data:`SPLIT_BY_LABEL`."""
    label = SPLIT_BY_LABEL.get(name)
    if label is None or label not in labels:
        return name
    return f'{name}{{{label}="{labels[label]}"}}'


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What an engine says about itself.  ``None`` where its metrics do not say."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # fraction 0..1
    # DCGM's profiling gauges of the replica's GPUs (0..1), where something exports them beside the engine's
    # metrics (the emulator does): how busy its tensor pipes and its HBM are (sched/phase.py).
    tensor_active: float | None = None
    dram_active: float | None = None
    # The engine's inter-token latency histogram's sum (seconds) and count (tokens), cumulative: their
    # growth between two scrapes is how fast its streams run now (sched/service_time.py ``TokenPace``).
    itl_sum_s: float | None = None
    itl_tokens: float | None = None


# Per kind, candidate names in order of preference: (running, waiting, kv usage).
_NAMES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "vllm": (
        ("vllm:num_requests_running",),
        # Newer vLLM splits the waiting count by reason: "capacity" (no room in the batch or the KV cache)
        # and "deferred" (a LoRA budget, a KV transfer from a prefill node): only the first says the replica
        # is full, so L2 reads it where it exists; older versions export the total only.
        (WAITING_FOR_CAPACITY, "vllm:num_requests_waiting"),
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    ),
    "sglang": (("sglang:num_running_reqs",), ("sglang:num_queue_reqs",), ("sglang:token_usage",)),
    "tgi": (("tgi_batch_current_size",), ("tgi_queue_size",), ()),
    "llamacpp": (
        ("llamacpp:requests_processing",),
        ("llamacpp:requests_deferred",),
        ("llamacpp:kv_cache_usage_ratio",),
    ),
}
_NAMES["emulator"] = _NAMES["vllm"]

#: dcgm-exporter's names (ratios 0..1 of the sampling interval), whatever the engine.  The tensor pipe's
#: share stands for compute; SM-active is no help (a bandwidth-bound decode keeps the SMs resident too).
DCGM_SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
DCGM_TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DCGM_DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent 0..100, as NVML's
_PHASE_NAMES = (DCGM_TENSOR_ACTIVE, DCGM_DRAM_ACTIVE)

#: Per kind, the inter-token latency histogram (older vLLM: time per output token), whose ``_sum`` and
#: ``_count`` grow with every token.  TGI's and llama.cpp's are observed once a request ends, too late
#: to tell a surge: their pools go by the measured service time alone.
_PACE_NAMES: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "sglang": ("sglang:inter_token_latency_seconds",),
}
_PACE_NAMES["emulator"] = _PACE_NAMES["vllm"]
_ANY_PACE_NAMES = tuple(dict.fromkeys(n for names in _PACE_NAMES.values() for n in names))

#: Every sample name any kind is read from (lets the shell skip the rest of a scrape cheaply).
METRIC_NAMES: frozenset[str] = frozenset(n.split("{", 1)[0] for triple in _NAMES.values() for group in triple
                                         for n in group) | frozenset(_PHASE_NAMES) \
    | frozenset(f"{n}{part}" for names in _PACE_NAMES.values() for n in names for part in ("_sum", "_count"))

#: Names that are a share of one engine's cache: across label sets (data-parallel engines behind one
#: endpoint, ``engine="0"``, ``engine="1"``) they are not summed — 0.6 + 0.7 would read as 1.3 %, light —
#: but the fullest one is taken, since a request can land on it.
FRACTION_NAMES: frozenset[str] = frozenset(n for _, _, kv in _NAMES.values() for n in kv) | frozenset(_PHASE_NAMES)


def _first(samples: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    for name in names:
        value = samples.get(name)
        if value is not None:
            return value
    return None


def _fraction(value: float | None) -> float | None:
    # Some engine versions report usage in percent, most as a fraction; 1.0 is ambiguous and
    # read as a fraction (full).
    if value is None:
        return None
    return value / 100.0 if value > 1.0 else max(0.0, value)


def load_from_samples(kind: str, samples: Mapping[str, float]) -> ReplicaLoad:
    """The load that ``samples`` (sample name → value summed over labels) report for an engine
    of ``kind``; an unknown or metric-less kind tries every known naming."""
    candidates = [_NAMES[kind]] if kind in _NAMES else list(_NAMES.values())
    tensor = _share(samples.get(DCGM_TENSOR_ACTIVE))
    dram = _share(samples.get(DCGM_DRAM_ACTIVE))
    itl_sum, itl_tokens = _pace_counters(kind, samples)
    for running_names, waiting_names, kv_names in candidates:
        running = _first(samples, running_names)
        waiting = _first(samples, waiting_names)
        kv = _fraction(_first(samples, kv_names))
        if running is not None or waiting is not None or kv is not None:
            return ReplicaLoad(running=running, waiting=waiting, kv_usage=kv, tensor_active=tensor, dram_active=dram,
                               itl_sum_s=itl_sum, itl_tokens=itl_tokens)
    return ReplicaLoad(tensor_active=tensor, dram_active=dram)


def _pace_counters(kind: str, samples: Mapping[str, float]) -> tuple[float | None, float | None]:
    """The first of ``kind``'s inter-token latency histograms (any kind's, for an unknown one) that
    ``samples`` hold whole: (sum, count), or (None, None)."""
    names = _PACE_NAMES.get(kind, ()) if kind in _NAMES else _ANY_PACE_NAMES
    for name in names:
        total, count = samples.get(f"{name}_sum"), samples.get(f"{name}_count")
        if total is not None and count is not None:
            return total, count
    return None, None


def _share(value: float | None) -> float | None:
    # DCGM's profiling ratios are fractions; clamped, since a resampled one may overshoot 1 a little.
    return None if value is None else min(1.0, max(0.0, value))
