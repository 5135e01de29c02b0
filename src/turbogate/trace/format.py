"""The trace format: one request per line after a header line (JSONL), token counts and times only.

A trace is what arrived, never what was said: each request's arrival offset, prompt and output
token counts, and where known its tenant, the tier it asked for and the one it was served, the
model and the HTTP status.  ``turbogate trace export`` writes it from the gateway's usage
records; ``trace/importers.py`` reads it from other tools' files; ``bench --trace`` and ``sim
--trace`` replay it.  docs/results-schema.md documents the schema.

    {"format": "turbogate-trace", "version": 1, "source": "azure-llm-csv", "start_unix": 1700158546.68,
     "requests": 2, "duration_s": 4.31, "attribution": "...", "notes": []}
    {"t": 0.0, "prompt_tokens": 374, "output_tokens": 44}
    {"t": 4.314577, "prompt_tokens": 396, "output_tokens": 109, "tenant": "acme", "tier_asked": "turbo"}

``t`` is seconds from the trace's start (the first request at 0 unless the trace says otherwise),
written to the microsecond; absent fields are unknown.  A token count is unknown for a request
the gateway refused before an engine counted it.  Readers accept every version in
:data:`READABLE_VERSIONS`; bump :data:`VERSION` on any change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from turbogate.errors import TurbogateError

FORMAT = "turbogate-trace"
VERSION = 1
READABLE_VERSIONS: tuple[int, ...] = (1,)
TIERS: tuple[str, ...] = ("turbo", "standard", "relax")


class TraceError(TurbogateError):
    """A trace file or replay option that cannot be used: the message names the file, the line and the
    field (or the option); ``hint``, when set, says what to do instead."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True, slots=True)
class TraceRequest:
    t: float  # seconds from the trace's start
    prompt_tokens: int | None  # as the engine counted them; None: unknown
    output_tokens: int | None
    tenant: str | None = None
    tier_asked: str | None = None
    tier_served: str | None = None
    model: str | None = None
    status: int | None = None


@dataclass(frozen=True, slots=True)
class TraceHeader:
    source: str  # where it came from: turbogate-export, azure-llm-csv, vllm-bench-serve, mooncake, ...
    start_unix: float | None = None  # wall clock (UTC seconds) of t = 0, when known
    attribution: str | None = None  # whom to credit (a licence's attribution), kept with every copy
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    header: TraceHeader
    requests: tuple[TraceRequest, ...]  # in arrival order

    @property
    def duration_s(self) -> float:
        return self.requests[-1].t if self.requests else 0.0

    def tenants(self) -> tuple[str, ...]:
        return tuple(sorted({r.tenant for r in self.requests if r.tenant is not None}))


_FIELDS = ("prompt_tokens", "output_tokens", "tenant", "tier_asked", "tier_served", "model", "status")


def request_dict(r: TraceRequest) -> dict[str, Any]:
    d: dict[str, Any] = {"t": round(r.t, 6)}
    for name in _FIELDS:
        value = getattr(r, name)
        if value is not None:
            d[name] = value
    return d


def dump_lines(trace: Trace) -> Iterator[bytes]:
    """The trace as JSONL lines (each ending in a newline), header first."""
    h = trace.header
    yield orjson.dumps({"format": FORMAT, "version": VERSION, "source": h.source, "start_unix": h.start_unix,
                        "requests": len(trace.requests), "duration_s": round(trace.duration_s, 6),
                        "attribution": h.attribution, "notes": list(h.notes)}) + b"\n"
    for r in trace.requests:
        yield orjson.dumps(request_dict(r)) + b"\n"


def _opt_int(d: dict[str, Any], name: str, where: str, minimum: int) -> int | None:
    v = d.get(name)
    if v is None:
        return None
    if type(v) is not int or v < minimum:
        raise TraceError(f"{where}: {name} must be an integer >= {minimum}, got {v!r}")
    return v


def _opt_str(d: dict[str, Any], name: str, where: str) -> str | None:
    v = d.get(name)
    if v is None:
        return None
    if not isinstance(v, str) or not v:
        raise TraceError(f"{where}: {name} must be a non-empty string, got {v!r}")
    return v


def _tier(d: dict[str, Any], name: str, where: str) -> str | None:
    v = _opt_str(d, name, where)
    if v is not None and v not in TIERS:
        raise TraceError(f"{where}: {name} must be one of {', '.join(TIERS)}, got {v!r}")
    return v


def request_from_dict(d: Any, where: str) -> TraceRequest:
    """One request line's object; TraceError names the field."""
    if not isinstance(d, dict):
        raise TraceError(f"{where}: a request must be a JSON object")
    t = d.get("t")
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
        raise TraceError(f"{where}: t must be a number of seconds >= 0, got {t!r}")
    return TraceRequest(float(t), _opt_int(d, "prompt_tokens", where, 0), _opt_int(d, "output_tokens", where, 0),
                        _opt_str(d, "tenant", where), _tier(d, "tier_asked", where), _tier(d, "tier_served", where),
                        _opt_str(d, "model", where), _opt_int(d, "status", where, 100))


def header_from_dict(d: Any, where: str) -> TraceHeader:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise TraceError(f"{where}: the first line must be a header with \"format\": \"{FORMAT}\"")
    version = d.get("version")
    if version not in READABLE_VERSIONS:
        raise TraceError(f"{where}: version {version!r} is not one this build reads "
                         f"({', '.join(map(str, READABLE_VERSIONS))})", hint="upgrade turbogate")
    start = d.get("start_unix")
    if start is not None and (isinstance(start, bool) or not isinstance(start, int | float)):
        raise TraceError(f"{where}: start_unix must be a number or null, got {start!r}")
    notes = d.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise TraceError(f"{where}: notes must be a list of strings")
    return TraceHeader(str(d.get("source") or "unknown"), None if start is None else float(start),
                       _opt_str(d, "attribution", where), tuple(notes))


def parse_lines(lines: Iterable[bytes | str], name: str = "trace") -> Trace:
    """A trace from its JSONL lines (blank lines skipped); requests are put in arrival order."""
    header: TraceHeader | None = None
    requests: list[TraceRequest] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name} line {n}"
        try:
            d = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TraceError(f"{where}: not JSON ({exc})") from None
        if header is None:
            header = header_from_dict(d, where)
        else:
            requests.append(request_from_dict(d, where))
    if header is None:
        raise TraceError(f"{name}: empty (no header line)")
    requests.sort(key=lambda r: r.t)  # stable: equal times keep the file's order
    return Trace(header, tuple(requests))


def rebase(requests: Iterable[TraceRequest]) -> tuple[float, tuple[TraceRequest, ...]]:
    """Requests with absolute times (any origin) as offsets from the earliest: (origin, requests)."""
    ordered = sorted(requests, key=lambda r: r.t)
    if not ordered:
        return 0.0, ()
    t0 = ordered[0].t
    return t0, tuple(TraceRequest(r.t - t0, r.prompt_tokens, r.output_tokens, r.tenant, r.tier_asked,
                                  r.tier_served, r.model, r.status) for r in ordered)
