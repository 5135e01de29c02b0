"""The trace format and its importers: what each tool's file becomes, and what a bad file is told."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from turbogate.trace.format import Trace, TraceError, TraceHeader, TraceRequest, dump_lines, parse_lines
from turbogate.trace.importers import AZURE_ATTRIBUTION, detect, load_trace, parse_trace
from turbogate.trace.stats import trace_workload

EXCERPT = Path(__file__).resolve().parents[2] / "examples" / "traces" / "azure-conv-2min.csv"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces" / "azure-llm-2023-conv.csv"


def test_a_trace_survives_its_own_file() -> None:
    reqs = (TraceRequest(0.0, 120, 30, "acme", "turbo", "standard", "m", 200),
            TraceRequest(0.001234, None, None, "beta", None, None, None, 429),
            TraceRequest(3.5, 7, 1))
    trace = Trace(TraceHeader("turbogate-export", 1.7e9, "credit", ("a note",)), reqs)
    back = parse_lines(b"".join(dump_lines(trace)).splitlines())
    assert back == trace
    header = orjson.loads(next(dump_lines(trace)))
    assert header["format"] == "turbogate-trace" and header["version"] == 1 and header["requests"] == 3


@pytest.mark.parametrize(("line", "words"), [
    (b'{"t": -1}', "t must be a number of seconds >= 0"),
    (b'{"t": 1, "prompt_tokens": 1.5}', "prompt_tokens must be an integer"),
    (b'{"t": 1, "tier_asked": "gold"}', "tier_asked must be one of turbo, standard, relax"),
    (b"not json", "line 2: not JSON"),
])
def test_a_bad_request_line_is_named(line: bytes, words: str) -> None:
    head = b'{"format": "turbogate-trace", "version": 1, "source": "x"}'
    with pytest.raises(TraceError, match=words) as err:
        parse_lines([head, line], "f.jsonl")
    assert "f.jsonl line 2" in str(err.value)


def test_an_unknown_version_asks_for_an_upgrade() -> None:
    with pytest.raises(TraceError, match="version 9") as err:
        parse_lines([b'{"format": "turbogate-trace", "version": 9}'])
    assert err.value.hint == "upgrade turbogate"


def test_the_azure_excerpt_reads_with_its_attribution() -> None:
    trace = load_trace(EXCERPT)
    rows = EXCERPT.read_text().splitlines()
    assert len(trace.requests) == len(rows) - 1
    assert trace.header.source == "azure-llm-csv" and trace.header.attribution == AZURE_ATTRIBUTION
    first, second = trace.requests[0], trace.requests[1]
    assert (first.t, first.prompt_tokens, first.output_tokens) == (0.0, 374, 44)
    # 18:15:50.9951690 − 18:15:46.6805900, to the microsecond
    assert second.t == pytest.approx(4.314579, abs=1e-6) and (second.prompt_tokens, second.output_tokens) == (396, 109)
    assert trace.header.start_unix == pytest.approx(1700158546.68059, abs=1e-5)
    assert all(b.t >= a.t for a, b in zip(trace.requests, trace.requests[1:], strict=False))


def test_the_whole_shared_hour_when_present() -> None:
    if not SHARED.exists():
        pytest.skip(f"the shared Azure trace is not at {SHARED} (CI keeps a copy of shared/ beside the clone)")
    w = trace_workload(load_trace(SHARED))
    assert w.requests > 19000 and 3400 < w.duration_s < 3600
    assert w.peak_rps > w.mean_rps > 5


def test_vllm_bench_serve_result() -> None:
    data = {"input_lens": [100, 200, 300], "output_lens": [10, 0, 30], "start_times": [50.5, 50.0, 51.25],
            "errors": ["", "timeout", ""], "ttfts": [0.1, 0.0, 0.2]}
    text = orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()  # as vLLM writes it: indented
    assert detect(text) == "vllm"
    trace = parse_trace(text)
    assert [(r.t, r.prompt_tokens, r.output_tokens) for r in trace.requests] == [
        (0.0, 200, None), (0.5, 100, 10), (1.25, 300, 30)]
    with pytest.raises(TraceError, match="no start_times"):
        parse_trace(orjson.dumps({"input_lens": [1], "output_lens": [1]}).decode())


def test_mooncake_trace() -> None:
    text = '{"timestamp": 1000, "input_length": 640, "output_length": 12, "hash_ids": [1, 2]}\n' \
           '{"timestamp": 2500, "input_length": 100, "output_length": 5, "hash_ids": [3]}\n'
    trace = parse_trace(text)
    assert trace.header.source == "mooncake"
    assert [(r.t, r.prompt_tokens, r.output_tokens) for r in trace.requests] == [(0.0, 640, 12), (1.5, 100, 5)]


def _usage_row(ts: float, latency: float, status: int = 200, tenant: str = "acme") -> dict[str, object]:
    return {"id": f"r{ts}", "ts": ts, "tenant": tenant, "model": "m", "tier_asked": "turbo", "tier_served": "turbo",
            "status": status, "prompt_tokens": 50 if status == 200 else 0, "completion_tokens": 9 if status == 200
            else 0, "queue_s": 0.0, "latency_s": latency, "cost_units": 1.0, "downgrade": None}


def test_usage_records_in_every_shape_the_gateway_writes() -> None:
    rows = [_usage_row(1000.5, 0.5), _usage_row(1003.0, 2.25), _usage_row(1001.2, 0.0, status=429, tenant="beta")]
    jsonl = "\n".join(orjson.dumps(r).decode() for r in rows) + "\n\x00\x00\x00"  # a journal file's zero tail
    api = orjson.dumps({"object": "usage", "start": 0, "end": 1, "group_by": ["records"], "data": rows}).decode()
    cols = list(rows[0])
    csv = ",".join(cols) + "\n" + "\n".join(",".join("" if r[c] is None else str(r[c]) for c in cols)
                                            for r in rows) + "\n"
    for text in (jsonl, api, csv):
        trace = parse_trace(text)
        assert trace.header.source == "turbogate-export"
        # arrivals are ts − latency: 1000.0, 1000.75, 1001.2
        got = [(round(r.t, 6), r.tenant, r.prompt_tokens, r.output_tokens, r.status) for r in trace.requests]
        assert got == [(0.0, "acme", 50, 9, 200), (0.75, "acme", 50, 9, 200), (1.2, "beta", None, None, 429)]
        assert trace.header.start_unix == pytest.approx(1000.0)


def test_an_unknown_file_says_how_to_name_its_format() -> None:
    with pytest.raises(TraceError) as err:
        parse_trace("a,b,c\n1,2,3\n")
    assert "--trace-format" in (err.value.hint or "")
