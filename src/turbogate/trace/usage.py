"""The gateway's usage records as a trace (pure): what ``turbogate trace export`` writes.

A usage record (sched/metering.py ``UsageRecord``, store/records.py's JSON line, the rows of
``GET /admin/usage?group_by=records``) is stamped when its request closes: ``ts`` is the wall clock
then and ``latency_s`` the time since the request arrived, so the arrival is ``ts - latency_s``
(exact to well under a microsecond at today's wall clock).  Its token counts are the engine's
(``usage`` of the answer); a request refused before any engine counted it has zero tokens, which
the trace writes as unknown.  Content is never in a record, so never in a trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from turbogate.trace.format import TIERS, Trace, TraceError, TraceHeader, TraceRequest, rebase

SOURCE = "turbogate-export"
#: The fields a usage row must have to become a trace request.
NEEDED = ("ts", "latency_s", "tenant", "tier_asked", "tier_served", "status", "prompt_tokens", "completion_tokens")


def _num(row: Mapping[str, Any], name: str, where: str) -> float:
    v = row.get(name)
    try:
        if v is None or v == "" or isinstance(v, bool):
            raise ValueError
        return float(v)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {name} must be a number, got {v!r}") from None


def _tier(value: Any) -> str | None:
    return value if isinstance(value, str) and value in TIERS else None


def usage_request(row: Mapping[str, Any], where: str) -> tuple[float, TraceRequest]:
    """(arrival wall time, the request) of one usage row (a dict of the record's fields)."""
    missing = [n for n in NEEDED if n not in row]
    if missing:
        raise TraceError(f"{where}: not a usage record (no {', '.join(missing)})")
    arrival = _num(row, "ts", where) - _num(row, "latency_s", where)
    status = int(_num(row, "status", where))
    prompt, output = int(_num(row, "prompt_tokens", where)), int(_num(row, "completion_tokens", where))
    ok = 200 <= status < 300
    model = row.get("model")
    return arrival, TraceRequest(arrival, prompt if ok or prompt else None, output if ok else None,
                                 str(row["tenant"]) or None, _tier(row["tier_asked"]), _tier(row["tier_served"]),
                                 model if isinstance(model, str) and model else None, status)


def usage_trace(rows: Iterable[Mapping[str, Any]], *, since: float | None = None, until: float | None = None,
                tenants: Sequence[str] = (), name: str = "usage", notes: Sequence[str] = ()) -> Trace:
    """A trace of the usage rows whose request arrived in [since, until) (wall seconds) and whose
    tenant is one of ``tenants`` (all when empty); ``t = 0`` is the first kept arrival."""
    wanted = set(tenants)
    kept: list[TraceRequest] = []
    for i, row in enumerate(rows, 1):
        arrival, req = usage_request(row, f"{name} record {i}")
        if since is not None and arrival < since:
            continue
        if until is not None and arrival >= until:
            continue
        if wanted and req.tenant not in wanted:
            continue
        kept.append(req)
    origin, requests = rebase(kept)
    return Trace(TraceHeader(SOURCE, origin if requests else since, None, tuple(notes)), requests)
