"""The bench's lean client (bench/http11.py): any fragmentation of a response parses the same through
the real protocol; both clients agree."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbogate.bench.arrivals import Arrivals, build_schedule
from turbogate.bench.client import Outcome
from turbogate.bench.http11 import Exchange, Http11Pool, _TimedConn
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


class _FakeTransport:
    """Stands in for the socket: records what the client wrote, and whether it dropped the connection."""

    def __init__(self) -> None:
        self.written = b""
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _parse(raw: bytes, cuts: list[int], stream: bool = True, eof: bool = False) -> Outcome:
    """POST through the bench's lean client on a connection whose bytes arrive cut at ``cuts``,
    with the consumer running between some pieces; ``eof``: then the server closes the connection."""

    async def main() -> Outcome:
        lean = Http11Pool("http://engine.test:8000")
        conn = _TimedConn(lean)
        transport = _FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        lean._idle.append(conn)
        task = asyncio.create_task(lean.post("/v1/chat/completions", b'{"x":1}',
                                             {"Content-Type": "application/json", "X-Turbogate-Tier": "turbo"},
                                             stream, 5.0))
        await asyncio.sleep(0)
        assert transport.written.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: engine.test:8000\r\n")
        assert b"X-Turbogate-Tier: turbo\r\n" in transport.written and transport.written.endswith(b'\r\n\r\n{"x":1}')
        edges = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
        for k, (a, b) in enumerate(itertools.pairwise(edges)):
            conn.data_received(raw[a:b])
            if k % 2:
                await asyncio.sleep(0)  # let the client consume some pieces one by one, others in a batch
        if eof:
            conn.connection_lost(None)
        out = await asyncio.wait_for(task, 1.0)
        # A complete keep-alive answer gives the connection back to the pool, anything else drops it.
        assert (conn in lean._idle) == (out.status is not None and not eof and not transport.aborted)
        return out

    return asyncio.run(main())


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


def test_chunks_are_timed_when_their_bytes_arrive_not_when_the_client_wakes() -> None:
    raw = _sse_response()
    head_end = raw.index(b"\r\n\r\n") + 4
    body = raw[head_end:]
    pieces = [raw[:head_end]] + [body[i:i + 40] for i in range(0, len(body), 40)]

    async def main() -> Outcome:
        lean = Http11Pool("http://engine.test:8000")
        conn = _TimedConn(lean)
        conn.connection_made(_FakeTransport())  # type: ignore[arg-type]
        lean._idle.append(conn)
        task = asyncio.create_task(lean.post("/v1/completions", b"{}", {}, True, 5.0))
        await asyncio.sleep(0)
        conn.data_received(pieces[0])
        await asyncio.sleep(0)
        for piece in pieces[1:]:
            time.sleep(0.004)  # the loop is blocked: the client cannot read before the end
            conn.data_received(piece)
        return await task

    out = asyncio.run(main())
    assert out.ok, out.error
    assert out.ttft is not None and out.ttft >= 0.004
    assert len(out.itl) == 4 and all(gap >= 0.004 for gap in out.itl), out.itl


def test_body_until_close_and_broken_answers() -> None:
    body = orjson.dumps({"choices": [{"text": "hi"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    out = _parse(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + body, [30], stream=False, eof=True)
    assert out.ok and out.output_tokens == 2, out.error
    out = _parse(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial", [], stream=False, eof=True)
    assert not out.ok and out.status == 200 and out.error is not None and out.error.startswith("connection lost")
    out = _parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", [], stream=True)
    assert not out.ok and out.error is not None and "bad HTTP" in out.error


async def test_total_timeout_and_refused_connection() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\ndata:\r\n")
        await writer.drain()
        await reader.read(1)  # never answers further; returns when the client drops the connection

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        lean = Http11Pool(f"http://127.0.0.1:{port}")
        out = await lean.post("/v1/completions", b"{}", {}, True, 0.2)
        assert not out.ok and out.error == "TimeoutError: no complete answer within 0.2s"
        assert 0.2 <= out.end - out.sent < 1.0
        lean.close()
    server.close()
    await server.wait_closed()
    out = await Http11Pool(f"http://127.0.0.1:{port}").post("/v1/completions", b"{}", {}, False, 1.0)
    assert not out.ok and out.status is None and out.error is not None and "cannot connect" in out.error


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


def test_send_now_writes_before_any_await_and_reports_once_at_the_end() -> None:
    """The dispatcher's send is synchronous on an idle connection; chunks only append until the end."""
    raw = _sse_response()

    async def main() -> tuple[Outcome, int, list[bool]]:
        lean = Http11Pool("http://engine.test:8000")
        assert lean.send_now("/v1/completions", b"{}", b"", 5.0) is None  # no idle connection: caller must connect
        conn = _TimedConn(lean)
        transport = _FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        lean._idle.append(conn)
        head = lean.head("/v1/completions", b"{}", {"Authorization": "Bearer k"})
        ex = Exchange("/v1/completions", b"{}", head, 5.0, time.perf_counter())
        calls: list[bool] = []
        ex.on_done = lambda e: calls.append(e.complete)
        assert lean.start_now(ex) and transport.written == head + b"{}"  # written before any await
        assert b"Authorization: Bearer k\r\n" in head
        for i in range(0, len(raw), 30):
            conn.data_received(raw[i:i + 30])
            assert len(calls) == int(ex.complete)  # called once, by the complete answer only
        assert conn in lean._idle  # reusable before anyone parsed the answer
        return lean.outcome(ex, True), len(ex.parts), calls

    out, parts, calls = asyncio.run(main())
    assert out.ok and out.output_tokens == 5 and parts > 5 and calls == [True], out.error
