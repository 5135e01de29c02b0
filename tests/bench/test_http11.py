"""The lean HTTP/1.1 client: any fragmentation of a response parses the same; both clients agree."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbogate.bench.arrivals import Arrivals, build_schedule
from turbogate.bench.client import Outcome
from turbogate.bench.http11 import _Exchange
from turbogate.bench.runner import Runner, Target
from turbogate.bench.shapes import Constant, shape_steps
from turbogate.bench.workload import TierMix, TruncNormal, Workload
from turbogate.procs import Service, start_emulator


def _sse_response() -> bytes:
    events = [{"choices": [{"delta": {"role": "assistant", "content": ""}}]}]
    events += [{"choices": [{"delta": {"content": f"w{i} "}}], "service_tier": "priority"} for i in range(5)]
    events += [{"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5}}]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    # Chunked framing with uneven chunk sizes (one SSE event may span chunks).
    chunks, pos, sizes = [], 0, [7, 100, 3, 250, 1]
    i = 0
    while pos < len(body):
        n = sizes[i % len(sizes)]
        part = body[pos:pos + n]
        chunks.append(f"{len(part):x}".encode() + b"\r\n" + part + b"\r\n")
        pos += n
        i += 1
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            b"server-timing: l1;dur=0.5, upstream;dur=20\r\nx-turbogate-tier: turbo\r\n\r\n")
    return head + b"".join(chunks) + b"0\r\n\r\n"


def _parse(raw: bytes, cuts: list[int], stream: bool = True) -> Outcome:
    loop = asyncio.new_event_loop()
    try:
        fut = loop.create_future()
        out = Outcome(sent=0.0, end=0.0)
        ex = _Exchange(out, stream, fut)
        edges = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
        for k, (a, b) in enumerate(itertools.pairwise(edges)):
            ex.feed(raw[a:b], float(k + 1))
        assert fut.done()
        return out
    finally:
        loop.close()


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 5000), max_size=40))
def test_chunked_sse_parses_the_same_however_it_is_split(cuts: list[int]) -> None:
    out = _parse(_sse_response(), cuts)
    assert out.ok and out.status == 200, out.error
    assert out.prompt_tokens == 12 and out.output_tokens == 5
    assert out.tier_served == "turbo"
    assert out.server_timing == {"l1": 0.5, "upstream": 20.0}
    assert out.ttft is not None and out.e2e is not None and out.e2e >= out.ttft
    assert len(out.itl) == 4  # five output chunks → four gaps; the role-only chunk is not output


def test_sized_error_body_and_plain_answer() -> None:
    err = orjson.dumps({"error": {"message": "queue full", "type": "overloaded"}})
    raw = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: " + str(len(err)).encode() + b"\r\n\r\n" + err
    out = _parse(raw, [20, 50])
    assert not out.ok and out.status == 503 and out.error == "HTTP 503: queue full"
    body = orjson.dumps({"choices": [{"text": "hi"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                         "service_tier": "flex"})
    raw = b"HTTP/1.1 200 OK\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    out = _parse(raw, [5], stream=False)
    assert out.ok and out.output_tokens == 2 and out.tier_served == "relax" and out.ttft == out.e2e


def test_stream_without_done_is_an_error() -> None:
    body = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
    raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + f"{len(body):x}".encode() + b"\r\n" + body + \
        b"\r\n0\r\n\r\n"
    out = _parse(raw, [])
    assert not out.ok and out.error == "stream ended without [DONE]"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = start_emulator("--time-scale", "0", "--model", "llama-3.2-1b", log_dir=tmp_path_factory.mktemp("l"))
    yield svc
    svc.stop()


@pytest.mark.parametrize("stream", [True, False])
def test_lean_and_aiohttp_clients_agree(emulator: Service, stream: bool, tmp_path: Path) -> None:
    shape = Constant(50, 1.0)
    wl = Workload(prompt_tokens=TruncNormal(40, 10, 10, 80), output_tokens=TruncNormal(12, 4, 2, 20),
                  tiers=TierMix.parse("turbo=1"))
    sched = build_schedule(shape, Arrivals(), wl, shape_steps(shape, 1), random.Random(3))

    async def run(client: str) -> list[tuple[object, ...]]:
        target = Target(base_url=emulator.url, route="/v1/chat/completions", model="llama-3.2-1b", stream=stream,
                        client=client)
        async with Runner(target) as runner:
            await runner.execute(sched)
        return [(r.ok, r.status, r.prompt_tokens, r.output_tokens, len(r.itl_s) if stream else None)
                for r in sorted(runner.records, key=lambda r: r.id)]

    lean, via_aiohttp = asyncio.run(run("lean")), asyncio.run(run("aiohttp"))
    assert lean == via_aiohttp
    assert all(row[0] for row in lean) and len(lean) == len(sched)
