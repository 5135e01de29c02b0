#!/usr/bin/env python3
"""The cheapest Python proxy there is: a floor for what any asyncio gateway can cost on a machine.

uvloop + httptools on both sides, no framework, no decisions: each client connection gets its own
keep-alive upstream connection, a request's bytes go upstream as they came once the request is
complete, and the answer's bytes go back as they came once it is complete.  No JSON parse, no
auth, no queue, no record.  What turbogate adds over this is the price of its logic; what this
adds over nginx is the price of Python and its event loop on this machine (gateway_overhead.py
measures all of them side by side).

    python benchmarks/floor_proxy.py --upstream http://127.0.0.1:PORT [--port 0] [--work-us REQUEST,ANSWER]

``--work-us`` makes it a *calibrated* floor: before forwarding each request (each answer) it runs
that many µs of ordinary interpreter work (dicts, lists, a JSON round trip) on the event loop, a
stand-in for a gateway's own code at the same place.  benchmarks/critical_path.py uses it to tell
a proxy's own work apart from what the machine's hand-overs cost as the round trip grows.

prints ``listening on http://HOST:PORT`` as its first line once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from pathlib import Path

import httptools

from openai_stub import start_listening  # beside this file (benchmarks/ is not a package)

_SAMPLE = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8,
           "stream": False, "metadata": {"tenant": "t", "tier": "turbo", "n": [1, 2, 3]}}


def busy_work(us: float) -> None:
    """Run ordinary interpreter work (it allocates, hashes and walks objects, as a gateway's code
    does) until ``us`` µs have passed: unlike a bare spin it also leaves the caches as such code
    would."""
    if us <= 0:
        return
    deadline = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < deadline:
        doc = json.loads(json.dumps(_SAMPLE))
        doc["headers"] = {f"h{i}": str(i) for i in range(8)}
        sorted(doc["headers"].items())


class _Upstream(asyncio.Protocol):
    """One upstream keep-alive connection: hands each complete answer to ``on_answer``."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.buf: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf.append(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        answer, self.buf = b"".join(self.buf), []
        busy_work(_Client.answer_work_us)
        self.client.answer(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.upstream_lost()


class _Client(asyncio.Protocol):
    upstream_addr: tuple[str, int] = ("127.0.0.1", 0)
    request_work_us: float = 0.0  # --work-us: busy work before each forward, each way
    answer_work_us: float = 0.0

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.buf: list[bytes] = []
        self.pending: list[bytes] = []
        self.connecting: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        self.connecting = loop.create_task(self._connect(loop))

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> None:
        _, proto = await loop.create_connection(lambda: _Upstream(self), *self.upstream_addr)
        self.upstream = proto
        for request in self.pending:
            self._forward(request)
        self.pending = []

    def data_received(self, data: bytes) -> None:
        self.buf.append(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def on_message_complete(self) -> None:
        request, self.buf = b"".join(self.buf), []
        busy_work(self.request_work_us)
        if self.upstream is None:
            self.pending.append(request)
        else:
            self._forward(request)

    def _forward(self, request: bytes) -> None:
        assert self.upstream is not None and self.upstream.transport is not None
        self.upstream.transport.write(request)

    def answer(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def upstream_lost(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Client, host, port, backlog=4096)
    print(f"listening on http://{host}:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def parse_work(text: str) -> tuple[float, float]:
    """``REQUEST,ANSWER`` µs of busy work (``--work-us``); one number is both."""
    parts = [float(p) for p in text.split(",")]
    if len(parts) not in (1, 2) or any(p < 0 for p in parts):
        raise argparse.ArgumentTypeError(f"--work-us wants REQUEST,ANSWER µs, each >= 0; got {text!r}")
    return parts[0], parts[-1]


def start_floor_proxy(upstream_url: str, cpus: set[int] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start the floor proxy as a child process in front of ``upstream_url``; its URL once it listens."""
    return start_listening(Path(__file__).resolve(), ["--upstream", upstream_url], "the floor proxy", cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, help="http://HOST:PORT of the server to forward to")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--work-us", type=parse_work, default=(0.0, 0.0), metavar="REQUEST,ANSWER",
                    help="µs of busy interpreter work before forwarding each request and each answer "
                         "(a calibrated floor; default 0,0)")
    args = ap.parse_args()
    host, _, port = args.upstream.removeprefix("http://").rstrip("/").partition(":")
    _Client.upstream_addr = (host, int(port))
    _Client.request_work_us, _Client.answer_work_us = args.work_us
    import uvloop

    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
