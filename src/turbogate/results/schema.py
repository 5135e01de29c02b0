"""The run-folder schema shared by ``turbogate bench`` (measured) and ``turbogate sim`` (predicted).

A run folder holds:

- ``requests.jsonl`` — one :class:`RequestRecord` per request, in schedule order;
- ``samples.jsonl``  — one :class:`Sample` per collected metric value (Prometheus scrapes, NVML, …);
- ``summary.json``   — a :class:`Summary`: schema version, kind, config, steps, per-step per-tier
  statistics, the knee per tier and the ROI table;
- ``summary.csv``    — the per-step per-tier statistics flattened, one row each;
- ``report.html``    — the self-contained report (optional for a simulator).

Times inside a run are seconds relative to the run's start (``Summary.started_at`` holds the wall
clock of that instant).  Bump :data:`SCHEMA_VERSION` on any change; readers accept every version in
:data:`READABLE_VERSIONS` (version 2 added the knee's evidence and the ``unfinished`` counts, with
defaults that make a version-1 summary read as before).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 2
READABLE_VERSIONS: tuple[int, ...] = (1, 2)
UNFINISHED_PREFIXES = ("unfinished", "cancelled")  # version 1 wrote "cancelled: ..."
RunKind = Literal["bench", "sim"]
KIND_VALUES: tuple[str, ...] = ("bench", "sim")
ALL = "all"  # the tier key that aggregates every request of a step
KNEE_METHODS: tuple[str, ...] = ("throughput", "latency", "goodput")


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request, as the client saw it (bench) or as the simulator predicts it (sim).

    ``scheduled_s`` is when the open-loop schedule wanted it sent; ``dispatch_lag_s`` how late the
    runner got to it; ``queue_s`` how long it then waited client-side for a concurrency slot;
    ``sent_s`` = scheduled + lag + queue, the instant the HTTP request left.  Latencies (TTFT, E2E)
    are measured from ``sent_s``; add lag and queue for latency from the scheduled instant.
    """

    id: int
    step: int  # index into Summary.steps
    offered_rps: float  # instantaneous offered load (all tiers) when it was scheduled
    scheduled_s: float
    sent_s: float | None  # None: the run stopped before it was sent
    dispatch_lag_s: float
    queue_s: float
    end_s: float | None  # last byte received (or the error), relative to run start
    tier_asked: str | None
    tier_served: str | None
    status: int | None  # HTTP status; None when no response (connection error, timeout)
    ok: bool
    error: str | None
    ttft_s: float | None  # vLLM: to the first streamed chunk carrying choices
    itl_s: tuple[float, ...]  # vLLM: one value per gap between chunks with choices
    tpot_s: float | None  # vLLM: (e2e - ttft) / (output_tokens - 1)
    e2e_s: float | None  # sent to last chunk
    prompt_tokens: int | None  # from usage
    output_tokens: int | None  # from usage
    server_timing_ms: Mapping[str, float] = field(default_factory=dict)  # Server-Timing name -> dur
    api_key: int | None = None  # index of the API key used (never the key itself)
    replica: str | None = None  # serving replica when known (simulator, gateway header)

    @property
    def unfinished(self) -> bool:
        """Sent, and still running when the drain (or Ctrl-C's grace) ended: neither a success nor an error."""
        return self.sent_s is not None and not self.ok and (self.error or "").startswith(UNFINISHED_PREFIXES)

    @property
    def shed(self) -> bool:
        """Rejected for load (429 / 503), as the gateway sheds."""
        return self.status in (429, 503)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "step": self.step,
            "offered_rps": self.offered_rps,
            "scheduled_s": self.scheduled_s,
            "sent_s": self.sent_s,
            "dispatch_lag_s": self.dispatch_lag_s,
            "queue_s": self.queue_s,
            "end_s": self.end_s,
            "tier_asked": self.tier_asked,
            "tier_served": self.tier_served,
            "status": self.status,
            "ok": self.ok,
            "error": self.error,
            "ttft_s": self.ttft_s,
            "itl_s": list(self.itl_s),
            "tpot_s": self.tpot_s,
            "e2e_s": self.e2e_s,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "server_timing_ms": dict(self.server_timing_ms),
            "api_key": self.api_key,
            "replica": self.replica,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RequestRecord:
        return cls(
            id=int(d["id"]),
            step=int(d["step"]),
            offered_rps=float(d["offered_rps"]),
            scheduled_s=float(d["scheduled_s"]),
            sent_s=_opt_float(d.get("sent_s")),
            dispatch_lag_s=float(d.get("dispatch_lag_s", 0.0)),
            queue_s=float(d.get("queue_s", 0.0)),
            end_s=_opt_float(d.get("end_s")),
            tier_asked=_opt_str(d.get("tier_asked")),
            tier_served=_opt_str(d.get("tier_served")),
            status=_opt_int(d.get("status")),
            ok=bool(d["ok"]),
            error=_opt_str(d.get("error")),
            ttft_s=_opt_float(d.get("ttft_s")),
            itl_s=tuple(float(x) for x in d.get("itl_s") or ()),
            tpot_s=_opt_float(d.get("tpot_s")),
            e2e_s=_opt_float(d.get("e2e_s")),
            prompt_tokens=_opt_int(d.get("prompt_tokens")),
            output_tokens=_opt_int(d.get("output_tokens")),
            server_timing_ms={str(k): float(v) for k, v in (d.get("server_timing_ms") or {}).items()},
            api_key=_opt_int(d.get("api_key")),
            replica=_opt_str(d.get("replica")),
        )


@dataclass(frozen=True, slots=True)
class Sample:
    """One collected value: a Prometheus sample, an NVML reading, or a bench-side series."""

    t: float  # seconds from run start
    source: str  # scrape URL, "nvml:<index>", or "bench"
    name: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "source": self.source, "name": self.name, "value": self.value,
                "labels": dict(self.labels)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sample:
        return cls(t=float(d["t"]), source=str(d["source"]), name=str(d["name"]), value=float(d["value"]),
                   labels={str(k): str(v) for k, v in (d.get("labels") or {}).items()})


@dataclass(frozen=True, slots=True)
class Step:
    """A load step: a window of the schedule held at (or averaging) one offered rate."""

    index: int
    start_s: float
    end_s: float
    offered_rps: float  # all tiers together

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "start_s": self.start_s, "end_s": self.end_s, "offered_rps": self.offered_rps}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        return cls(index=int(d["index"]), start_s=float(d["start_s"]), end_s=float(d["end_s"]),
                   offered_rps=float(d["offered_rps"]))
