"""Published serving measurements as data: ``perf/data/published_cells.yaml``, one cell a figure.

Each cell names its source (title, URL or repository and path, date), the engine and version, the
deployment (model, GPU, TP, precision, memory share), the request lengths, the load (offline: all
requests at once; rate: Poisson arrivals; concurrency: a closed loop of N clients; burst: N requests
at once, measured as one batch) and one metric.  The split into a fitting half and a hold-out half
is a property of the cell's id (:func:`split_of`), so it was fixed before anything was fitted and
cannot drift.  Reading the packaged file is this module's only I/O (like ``load_hf_config``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import yaml

from turbogate.errors import CatalogError

LoadKind = Literal["offline", "rate", "concurrency", "burst"]
Lengths = Literal["fixed", "uniform", "sharegpt-mean"]
METRICS = ("output_tok_s", "ttft_median_ms", "ttft_mean_ms", "tpot_median_ms", "tpot_mean_ms", "itl_median_ms",
           "itl_mean_ms", "e2e_mean_ms")
LATENCY_METRICS = tuple(m for m in METRICS if m != "output_tok_s")
DATA_FILE = "published_cells.yaml"


@dataclass(frozen=True, slots=True)
class Source:
    key: str
    title: str
    url: str
    date: str
    method: str
    repo: str = ""
    path: str = ""
    commit: str = ""


@dataclass(frozen=True, slots=True)
class Load:
    kind: LoadKind
    requests: int
    rate: float = 0.0  # requests/s, for "rate"
    concurrency: int = 0  # clients, for "concurrency"


@dataclass(frozen=True, slots=True)
class PublishedCell:
    """One published figure and everything needed to reproduce its setting in the model."""

    id: str
    source: str
    engine: str
    engine_version: str
    engine_profile: str  # the turbogate engine profile whose fit this cell belongs to
    model: str
    gpu: str
    tp: int
    dtype: str
    kv_dtype: str
    gpu_mem_util: float
    isl: int
    osl: int
    lengths: Lengths
    load: Load
    metric: str
    value: float
    split: Literal["fit", "holdout"]
    note: str = ""

    @property
    def is_latency(self) -> bool:
        return self.metric in LATENCY_METRICS

    @property
    def mean_lengths(self) -> tuple[int, int]:
        """The (prompt, output) the closed form takes: the means where lengths are drawn uniformly."""
        if self.lengths == "uniform":
            return (self.isl + 1) // 2, (self.osl + 1) // 2
        return self.isl, self.osl


def split_of(cell_id: str) -> Literal["fit", "holdout"]:
    """The half a cell belongs to: fit when the SHA-256 of its id is even (fixed before any fit)."""
    return "fit" if int(hashlib.sha256(cell_id.encode()).hexdigest(), 16) % 2 == 0 else "holdout"


def _cell(raw: dict[str, Any]) -> PublishedCell:
    load = raw["load"]
    cell = PublishedCell(
        id=str(raw["id"]), source=str(raw["source"]), engine=str(raw["engine"]),
        engine_version=str(raw["engine_version"]), engine_profile=str(raw["engine_profile"]), model=str(raw["model"]),
        gpu=str(raw["gpu"]), tp=int(raw["tp"]), dtype=str(raw["dtype"]), kv_dtype=str(raw["kv_dtype"]),
        gpu_mem_util=float(raw["gpu_mem_util"]), isl=int(raw["isl"]), osl=int(raw["osl"]), lengths=raw["lengths"],
        load=Load(kind=load["kind"], requests=int(load["requests"]), rate=float(load.get("rate", 0.0)),
                  concurrency=int(load.get("concurrency", 0))),
        metric=str(raw["metric"]), value=float(raw["value"]), split=raw["split"], note=str(raw.get("note", "")),
    )
    if cell.metric not in METRICS:
        raise CatalogError(f"published cell {cell.id}: unknown metric {cell.metric!r}")
    if cell.lengths not in ("fixed", "uniform", "sharegpt-mean"):
        raise CatalogError(f"published cell {cell.id}: unknown lengths {cell.lengths!r}")
    if cell.load.kind not in ("offline", "rate", "concurrency", "burst"):
        raise CatalogError(f"published cell {cell.id}: unknown load kind {cell.load.kind!r}")
    return cell


@lru_cache(maxsize=1)
def _document() -> dict[str, Any]:
    text = resources.files("turbogate.perf").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


def published_sources() -> dict[str, Source]:
    return {key: Source(key=key, **{k: str(v) for k, v in raw.items() if k != "lengths_note"})
            for key, raw in _document()["sources"].items()}


def published_cells(split: str | None = None, profile: str | None = None) -> tuple[PublishedCell, ...]:
    """Every cell of the data file, or one half (``split``) and/or one engine profile's."""
    cells = tuple(_cell(raw) for raw in _document()["cells"])
    return tuple(c for c in cells if (split is None or c.split == split)
                 and (profile is None or c.engine_profile == profile))
