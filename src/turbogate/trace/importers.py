"""Read a trace from any file the replay accepts, whatever tool wrote it (parsing pure; ``load_trace``
opens the file).

==================  ==========================================================================
format              what it is
==================  ==========================================================================
``turbogate``       this project's trace (trace/format.py), e.g. from ``turbogate trace export``
``usage``           the gateway's usage records: the journal / buffer JSONL lines, or
                    ``GET /admin/usage?group_by=records`` as JSON or CSV
``azure``           the Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``)
``vllm``            ``vllm bench serve --save-result --save-detailed`` JSON (``start_times``,
                    ``input_lens``, ``output_lens``; failed requests, with an ``errors`` entry,
                    are kept with unknown output)
``mooncake``        Mooncake / SGLang ``bench_serving`` trace JSONL (``timestamp`` in ms,
                    ``input_length``, ``output_length``)
==================  ==========================================================================
"""

from __future__ import annotations

import calendar
import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from turbogate.trace.format import FORMAT, Trace, TraceError, TraceHeader, TraceRequest, parse_lines, rebase
from turbogate.trace.usage import usage_trace

FORMATS: tuple[str, ...] = ("auto", "turbogate", "usage", "azure", "vllm", "mooncake")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: How to credit the Azure LLM inference traces (CC BY 4.0), as their dataset asks.
AZURE_ATTRIBUTION = (
    "Azure LLM inference trace (Azure Public Dataset, github.com/Azure/AzurePublicDataset), CC BY 4.0. "
    "Pratyush Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Íñigo Goiri, Saeed Maleki, Ricardo Bianchini. "
    "\"Splitwise: Efficient generative LLM inference using phase splitting\", ISCA 2024.")


def _azure_time(value: str, where: str) -> float:
    """``2023-11-16 18:15:46.6805900`` (UTC, any number of fraction digits) → unix seconds."""
    whole, _, frac = value.strip().partition(".")
    try:
        date, clock = whole.split(" ")
        y, mo, d = (int(x) for x in date.split("-"))
        h, mi, s = (int(x) for x in clock.split(":"))
        return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP {value!r} is not 'YYYY-MM-DD HH:MM:SS.fff'") from None


def _int(value: Any, name: str, where: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {name} must be an integer, got {value!r}") from None
    if n < 0:
        raise TraceError(f"{where}: {name} must be >= 0, got {n}")
    return n


def parse_azure(text: str, name: str = "azure") -> Trace:
    rows = csv.reader(io.StringIO(text))
    head = next(rows, None)
    if head is None or tuple(c.strip() for c in head[:3]) != AZURE_COLUMNS:
        raise TraceError(f"{name}: not an Azure LLM trace (the header must be {','.join(AZURE_COLUMNS)})")
    out: list[TraceRequest] = []
    for n, row in enumerate(rows, 2):
        if not row:
            continue
        where = f"{name} line {n}"
        if len(row) < 3:
            raise TraceError(f"{where}: expected 3 columns, got {len(row)}")
        out.append(TraceRequest(_azure_time(row[0], where), _int(row[1], "ContextTokens", where),
                                _int(row[2], "GeneratedTokens", where)))
    origin, requests = rebase(out)
    return Trace(TraceHeader("azure-llm-csv", origin if requests else None, AZURE_ATTRIBUTION), requests)


def parse_vllm(data: Any, name: str = "vllm") -> Trace:
    if not isinstance(data, dict) or "input_lens" not in data:
        raise TraceError(f"{name}: not a vllm bench serve result (no input_lens)")
    starts = data.get("start_times")
    if not isinstance(starts, list):
        raise TraceError(f"{name}: this vllm bench serve result has no start_times",
                         hint="save it with a vLLM whose bench serve records start_times, and --save-detailed")
    ins, outs = data.get("input_lens") or [], data.get("output_lens") or []
    errors = data.get("errors") or [None] * len(starts)
    if not (len(starts) == len(ins) == len(outs) == len(errors)):
        raise TraceError(f"{name}: start_times, input_lens, output_lens and errors differ in length")
    reqs = []
    for i, (t, p, o, err) in enumerate(zip(starts, ins, outs, errors, strict=True)):
        where = f"{name} request {i}"
        if isinstance(t, bool) or not isinstance(t, int | float):
            raise TraceError(f"{where}: start_times[{i}] must be a number, got {t!r}")
        reqs.append(TraceRequest(float(t), _int(p, "input_lens", where),
                                 None if err else _int(o, "output_lens", where)))
    _, requests = rebase(reqs)
    return Trace(TraceHeader("vllm-bench-serve", None), requests)


def parse_mooncake(lines: list[Any], name: str = "mooncake") -> Trace:
    reqs = []
    for i, d in enumerate(lines, 1):
        where = f"{name} line {i}"
        if not isinstance(d, dict) or "timestamp" not in d or "input_length" not in d:
            raise TraceError(f"{where}: not a Mooncake trace line (timestamp, input_length, output_length)")
        ms = d["timestamp"]
        if isinstance(ms, bool) or not isinstance(ms, int | float) or ms < 0:
            raise TraceError(f"{where}: timestamp must be milliseconds >= 0, got {ms!r}")
        reqs.append(TraceRequest(ms / 1000.0, _int(d["input_length"], "input_length", where),
                                 _int(d.get("output_length"), "output_length", where)))
    _, requests = rebase(reqs)
    return Trace(TraceHeader("mooncake", None), requests)


def jsonl_objects(text: str, name: str) -> list[Any]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip().strip("\x00")  # a usage journal file holds its records up to its first zero byte
        if not line:
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise TraceError(f"{name} line {n}: not JSON ({exc})") from None
    return out


def detect(text: str) -> str:
    """The format of a file's text (see the module's table); TraceError when none fits."""
    head = text.lstrip("\ufeff \t\r\n")[:4096]
    first = head.splitlines()[0] if head else ""
    if first.startswith("TIMESTAMP,"):
        return "azure"
    if first.startswith(("ts,", "id,")) and "latency_s" in first:
        return "usage"
    if first.startswith("{"):
        try:
            d = orjson.loads(first)
        except orjson.JSONDecodeError:
            d = None
        if isinstance(d, dict):
            if d.get("format") == FORMAT:
                return "turbogate"
            if "timestamp" in d and "input_length" in d:
                return "mooncake"
            if "latency_s" in d and "ts" in d:
                return "usage"
        if d is None or (isinstance(d, dict) and ("input_lens" in d or d.get("object") == "usage")):
            return "vllm" if '"input_lens"' in text else "usage"
    raise TraceError("cannot tell the trace format from the first line",
                     hint=f"pass --trace-format (one of {', '.join(FORMATS[1:])})")


def _usage(text: str, name: str) -> Trace:
    stripped = text.lstrip()
    if stripped.startswith(("ts,", "id,")):
        return usage_trace(csv.DictReader(io.StringIO(stripped)), name=name)
    if stripped.startswith("{") and '"object"' in stripped[:200]:
        data = orjson.loads(stripped)
        rows = data.get("data") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise TraceError(f"{name}: an /admin/usage answer without a data list")
        return usage_trace(rows, name=name)
    return usage_trace(jsonl_objects(text, name), name=name)


PARSERS: dict[str, Callable[[str, str], Trace]] = {
    "turbogate": lambda text, name: parse_lines(text.splitlines(), name),
    "usage": _usage,
    "azure": parse_azure,
    "vllm": lambda text, name: parse_vllm(orjson.loads(text), name),
    "mooncake": lambda text, name: parse_mooncake(jsonl_objects(text, name), name),
}


def parse_trace(text: str, fmt: str = "auto", name: str = "trace") -> Trace:
    if fmt not in FORMATS:
        raise TraceError(f"--trace-format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    kind = detect(text) if fmt == "auto" else fmt
    try:
        return PARSERS[kind](text, name)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"{name}: not {kind} JSON ({exc})") from None


def load_trace(path: Path, fmt: str = "auto") -> Trace:
    """Read ``path`` in format ``fmt`` (``auto``: told by its first line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"trace {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise TraceError(f"trace {path}: not UTF-8 text") from None
    return parse_trace(text, fmt, str(path))
