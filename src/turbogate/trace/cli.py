"""``turbogate trace``: capture the gateway's traffic as a trace, convert other tools' traces, show one.

    turbogate trace export --config gateway.yaml --since 2026-12-04T10:00 --until 2026-12-04T11:00 -o hour.jsonl
    turbogate trace export --gateway http://127.0.0.1:8080 --admin-token $TOKEN --tenant acme -o acme.jsonl
    turbogate trace import azure-llm-2023-conv.csv -o azure.jsonl
    turbogate trace show hour.jsonl

A trace holds arrival times, tenants, tiers, models, statuses and token counts, never content
(docs/bench.md, "Replaying a trace"; the schema: docs/results-schema.md).
"""

from __future__ import annotations

import asyncio
import calendar
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from turbogate.clierrors import OneLineErrors
from turbogate.errors import BadInput, TurbogateError
from turbogate.trace.format import Trace, TraceError, dump_lines
from turbogate.trace.importers import FORMATS, jsonl_objects, load_trace
from turbogate.trace.stats import trace_workload
from turbogate.trace.usage import usage_trace

app = typer.Typer(help="Capture the gateway's traffic as a trace (export), convert other tools' traces (import), "
                  "and describe one (show). Replay one with `bench --trace` or `sim --trace`.",
                  add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineErrors)

#: Records are stamped when their request ends; a store is asked this much before --since so a
#: request that arrived inside the window and ended after a long answer is not missed.
LONGEST_REQUEST_S = 3600.0


def parse_when(value: str, what: str, now: float) -> float:
    """Unix seconds, an ISO-8601 UTC time (``2026-12-04T10:00[:00]``, ``2026-12-04``), or ``-2h`` /
    ``-30m`` / ``-90s`` before now."""
    v = value.strip()
    try:
        return float(v)
    except ValueError:
        pass
    if v.startswith("-") and v[-1:] in ("s", "m", "h") and v[1:-1].replace(".", "", 1).isdigit():
        return now - float(v[1:-1]) * {"s": 1, "m": 60, "h": 3600}[v[-1]]
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"):
        try:
            return float(calendar.timegm(time.strptime(v.removesuffix("Z"), fmt)))
        except ValueError:
            continue
    raise TraceError(f"{what}: {value!r} is not unix seconds, an ISO time (2026-12-04T10:00, UTC) or -2h")


def write_trace(trace: Trace, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("wb") as f:
        f.writelines(dump_lines(trace))
    tmp.replace(out)  # a reader never sees half a trace


def _from_gateway(url: str, token: str, since: float, until: float, tenants: Sequence[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for tenant in list(tenants) or [""]:
        q = {"group_by": "records", "format": "json", "start": repr(since - LONGEST_REQUEST_S), "end": repr(until +
             LONGEST_REQUEST_S)}
        if tenant:
            q["tenant"] = tenant
        req = urllib.request.Request(url.rstrip("/") + "/admin/usage?" + urllib.parse.urlencode(q),
                                     headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise TraceError(f"--gateway: GET /admin/usage answered HTTP {exc.code}: {detail}",
                             hint="check --admin-token" if exc.code == 401 else None) from None
        except (urllib.error.URLError, OSError) as exc:
            raise TraceError(f"--gateway: cannot reach {url} ({exc})", hint="is the gateway up?") from None
        rows += body.get("data", [])
    return rows


def _from_store(config: Path, since: float, until: float) -> list[dict[str, Any]]:
    from turbogate.config import load_config
    from turbogate.gateway.metering import make_store
    from turbogate.store.base import COLUMNS

    os.environ.setdefault("TURBOGATE_CONFIG", str(config))  # the store's default path is beside the config
    store, _, name = make_store(load_config(config))

    async def read() -> list[dict[str, Any]]:
        await store.open()
        try:
            records = await store.usage(None, since - LONGEST_REQUEST_S, until + LONGEST_REQUEST_S)
        finally:
            await store.close()
        return [{c: getattr(r, c) for c in COLUMNS} for r in records]

    if name == "memory store":
        raise TraceError(f"--config {config}: its store is the gateway's memory",
                         hint="export from the running gateway with --gateway URL --admin-token TOKEN")
    return asyncio.run(read())


def _from_files(paths: Sequence[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in paths:
        files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace")
            rows += [d for d in jsonl_objects(text, str(f)) if isinstance(d, dict)]
    return rows


@app.command("export")
def export(
    out: Path = typer.Option(..., "--out", "-o", help="The trace file to write (JSONL)."),
    config: Path | None = typer.Option(None, "--config", help="Read the usage records from this gateway config's "
                                       "store (SQLite or Redis)."),
    gateway: str | None = typer.Option(None, "--gateway", help="Read them from a running gateway's GET /admin/usage "
                                       "(any store, memory included)."),
    admin_token: str | None = typer.Option(None, "--admin-token", envvar="TURBOGATE_ADMIN_TOKEN",
                                           help="The gateway's admin token (with --gateway)."),
    usage: list[Path] = typer.Option([], "--usage", help="Read them from usage-record JSONL files: a gateway's "
                                     "journal or buffer files, or a folder of them (repeatable)."),
    since: str | None = typer.Option(None, "--since", help="Keep requests that arrived at or after this: unix "
                                     "seconds, an ISO time in UTC (2026-12-04T10:00) or -2h. Default: 30 days ago."),
    until: str | None = typer.Option(None, "--until", help="...and before this (default: now)."),
    tenant: list[str] = typer.Option([], "--tenant", help="Keep only this tenant's requests (repeatable)."),
) -> None:
    """Write a trace of what the gateway served: arrival, tenant, tiers, model, status, tokens; no content."""
    try:
        now = time.time()
        t_until = parse_when(until, "--until", now) if until else now
        t_since = parse_when(since, "--since", now) if since else t_until - 30 * 86400
        if t_until <= t_since:
            raise TraceError("--until must come after --since")
        sources = [s for s in (config, gateway, usage or None) if s is not None]
        if len(sources) != 1:
            raise TraceError("give exactly one of --config, --gateway or --usage")
        if gateway is not None:
            if not admin_token:
                raise TraceError("--gateway needs --admin-token (or TURBOGATE_ADMIN_TOKEN)")
            rows = _from_gateway(gateway, admin_token, t_since, t_until, tenant)
            where = gateway
        elif config is not None:
            rows = _from_store(config, t_since, t_until)
            where = f"the store of {config}"
        else:
            rows = _from_files(usage)
            where = ", ".join(map(str, usage))
        trace = usage_trace(rows, since=t_since, until=t_until, tenants=tenant, name=where,
                            notes=[f"exported from {where}"])
        write_trace(trace, out)
    except TurbogateError as exc:
        raise BadInput(str(exc), exc.hint) from None  # one line, exit 2 (clierrors.py)
    typer.echo(f"{len(trace.requests)} requests over {trace.duration_s:.1f} s written to {out}")


@app.command("import")
def import_(
    source: Path = typer.Argument(..., help="A trace in any format bench --trace reads."),
    out: Path = typer.Option(..., "--out", "-o", help="The turbogate trace to write (JSONL)."),
    fmt: str = typer.Option("auto", "--format", help=f"{', '.join(FORMATS)}."),
) -> None:
    """Convert another tool's trace (Azure LLM CSV, vllm bench serve JSON, Mooncake JSONL, usage records)."""
    try:
        trace = load_trace(source, fmt)
        write_trace(trace, out)
    except TurbogateError as exc:
        raise BadInput(str(exc), exc.hint) from None  # one line, exit 2 (clierrors.py)
    typer.echo(f"{len(trace.requests)} requests ({trace.header.source}) over {trace.duration_s:.1f} s written to {out}")
    if trace.header.attribution:
        typer.echo(f"attribution (keep it with every copy): {trace.header.attribution}")


@app.command("show")
def show(
    source: Path = typer.Argument(..., help="A trace in any format bench --trace reads."),
    fmt: str = typer.Option("auto", "--format", help=f"{', '.join(FORMATS)}."),
    bin_s: float = typer.Option(60.0, "--bin", min=1.0, help="Seconds per bin of the peak rate."),
    speedup: float = typer.Option(1.0, "--speedup", min=1e-6, help="Rates as replayed K times faster."),
) -> None:
    """Print a trace's workload as one JSON object: requests, mean and peak rate, token lengths."""
    try:
        trace = load_trace(source, fmt)
    except TurbogateError as exc:
        raise BadInput(str(exc), exc.hint) from None  # one line, exit 2 (clierrors.py)
    d = trace_workload(trace, bin_s, speedup).to_dict()
    d["source"], d["attribution"] = trace.header.source, trace.header.attribution
    typer.echo(json.dumps(d))

