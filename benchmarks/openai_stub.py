#!/usr/bin/env python3
"""A neutral, fast OpenAI-compatible stub: raw asyncio + httptools, no turbogate code on its path.

For measurements where the upstream must cost as little as possible and must not share code with
what is measured (the gateway's overhead, the bench's dispatch capacity).  ``POST
/v1/chat/completions`` and ``/v1/completions`` answer at once: a small JSON completion, or with
``"stream": true`` an SSE stream of ``max_tokens`` token chunks (each written on its own turn of
the event loop, so they leave as separate packets, as an engine's would), a usage chunk and
``[DONE]``.  ``GET /health`` and ``/metrics`` answer too, so a gateway can use it as a replica.
Keep-alive HTTP/1.1; ``Content-Length`` requests only (what every client here sends).

    python benchmarks/openai_stub.py [--host 127.0.0.1] [--port 0]

prints ``listening on http://HOST:PORT`` as its first line once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httptools
import orjson

_JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
_SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
_EMPTY_200 = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s"
_METRICS = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class StubProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        t = self.transport
        assert t is not None
        url, body, self.body = self.url, b"".join(self.body), []
        if url in (b"/v1/chat/completions", b"/v1/completions"):
            req = orjson.loads(body) if body else {}
            chat = url == b"/v1/chat/completions"
            n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 4)
            model = req.get("model", "stub")
            if req.get("stream"):
                t.write(_SSE_HEAD)
                asyncio.get_running_loop().call_soon(self._stream, model, chat, n, 0)
                return
            choice = ({"index": 0, "message": {"role": "assistant", "content": "hi " * n}, "finish_reason": "length"}
                      if chat else {"index": 0, "text": "hi " * n, "finish_reason": "length"})
            out = orjson.dumps({"id": "stub", "object": "chat.completion" if chat else "text_completion",
                                "created": int(time.time()), "model": model, "choices": [choice],
                                "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}})
            t.write(_JSON_HEAD % len(out) + out)
        elif url == b"/health":
            t.write(_EMPTY_200 % (2, b"ok"))
        elif url == b"/metrics":
            t.write(_EMPTY_200 % (len(_METRICS), _METRICS))
        else:
            t.write(_NOT_FOUND)
        if not self.parser.should_keep_alive():
            t.close()

    def _stream(self, model: str, chat: bool, n: int, i: int) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        if i < n:
            choice = ({"index": 0, "delta": {"content": "hi "}, "finish_reason": None} if chat
                      else {"index": 0, "text": "hi ", "finish_reason": None})
            event = orjson.dumps({"id": "stub", "model": model, "choices": [choice]})
            t.write(_chunk(b"data: " + event + b"\n\n"))
            asyncio.get_running_loop().call_soon(self._stream, model, chat, n, i + 1)
            return
        usage = orjson.dumps({"id": "stub", "model": model, "choices": [],
                              "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}})
        t.write(_chunk(b"data: " + usage + b"\n\n") + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(StubProtocol, host, port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on http://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def nginx_preamble(folder: Path, workers: int) -> str:
    """The start of an nginx.conf shared by this module's fixed-answer server and the reference
    proxy of gateway_overhead.py: every path under ``folder``, no access log; it ends inside the
    ``http {`` block."""
    return f"""worker_processes {workers};
daemon off;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {folder}/body; proxy_temp_path {folder}/proxy; fastcgi_temp_path {folder}/fcgi;
  uwsgi_temp_path {folder}/uwsgi; scgi_temp_path {folder}/scgi;
"""


def start_listening(script: Path, args: list[str], what: str,
                    cpus: set[int] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start a benchmark server ``script`` (one that prints ``listening on URL`` first) as a child
    process, optionally pinned to ``cpus``; it and its URL once it listens."""
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"{what} did not start: {line!r}")
    if cpus:
        import os

        os.sched_setaffinity(proc.pid, cpus)
    return proc, line.removeprefix("listening on ")


def start_stub(cpus: set[int] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start the stub as a child process (optionally pinned to ``cpus``); its URL once it listens."""
    return start_listening(Path(__file__).resolve(), [], "the OpenAI stub", cpus)


_FIXED_COMPLETION = ('{"id":"nginx","object":"text_completion","created":0,"model":"stub","choices":[{"index":0,'
                     '"text":"hi ","finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":1,'
                     '"total_tokens":9}}')
_FIXED_CHAT = ('{"id":"nginx","object":"chat.completion","created":0,"model":"stub","choices":[{"index":0,'
               '"message":{"role":"assistant","content":"hi "},"finish_reason":"length"}],"usage":{"prompt_tokens":8,'
               '"completion_tokens":1,"total_tokens":9}}')


def nginx_binary() -> str | None:
    import shutil

    return shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


def sse_chat_stream(events: int, model: str = "stub") -> bytes:
    """A complete, valid OpenAI chat stream of ``events`` one-token ``chat.completion.chunk`` events
    (the last with ``finish_reason: "length"``), a usage chunk (``completion_tokens = events``) and
    ``data: [DONE]``: what a vLLM server sends for ``"stream": true`` with usage included."""
    if events < 1:
        raise ValueError(f"events must be at least 1, not {events}")
    head = {"id": "chatcmpl-nginx", "object": "chat.completion.chunk", "created": 0, "model": model}
    out = []
    for i in range(events):
        choice = {"index": 0, "delta": {"content": "hi "}, "finish_reason": "length" if i == events - 1 else None}
        out.append(b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n")
    usage = {"prompt_tokens": 8, "completion_tokens": events, "total_tokens": 8 + events}
    out.append(b"data: " + orjson.dumps({**head, "choices": [], "usage": usage}) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def start_nginx_stub(folder: Path, workers: int = 1,
                     sse_events: int | None = None) -> tuple[subprocess.Popen[bytes], str] | None:
    """nginx answering every non-streamed completion with one fixed OpenAI JSON body (``return 200``):
    an upstream that costs far less CPU per request than any Python server, for measurements
    where the client, not the server, must be what fills the cores.  None when nginx is not
    installed or does not start.

    With ``sse_events``, ``POST /v1/chat/completions`` answers (whatever the request asks) with
    :func:`sse_chat_stream`'s fixed stream of that many events, served as a static file
    (``text/event-stream``, Content-Length, sendfile, its descriptor cached): nginx pays about
    once per request while a client parses every event, so the client is what fills its core.
    (The static module refuses POST with 405; ``error_page 405 =200`` turns that into the file.)
    Without it streams are not served (the same JSON comes back)."""
    import socket
    import urllib.request

    binary = nginx_binary()
    if binary is None:
        return None
    with socket.socket() as probe:  # a free port (nginx cannot report one it chose)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder.mkdir(parents=True, exist_ok=True)
    chat = f"location = /v1/chat/completions {{ return 200 '{_FIXED_CHAT}'; }}"
    if sse_events is not None:
        (folder / "stream.sse").write_bytes(sse_chat_stream(sse_events))
        # nginx started by root serves files as its worker user (nobody): the file must be readable
        # by others, and its folder (a mkdtemp one is 0700) passable.
        (folder / "stream.sse").chmod(0o644)
        folder.chmod(folder.stat().st_mode | 0o055)
        chat = ("location = /v1/chat/completions { error_page 405 =200 /stream.sse; return 405; }\n"
                f"    location = /stream.sse {{ internal; root {folder}; default_type text/event-stream; etag off;\n"
                "      sendfile on; open_file_cache max=16; }")
    conf = folder / "nginx.conf"
    conf.write_text(nginx_preamble(folder, workers) + f"""  keepalive_requests 1000000;
  default_type application/json;
  server {{
    listen 127.0.0.1:{port};
    location = /v1/completions {{ return 200 '{_FIXED_COMPLETION}'; }}
    {chat}
    location = /health {{ return 200 '{{"status":"ok"}}'; }}
    location / {{ return 404 '{{}}'; }}
  }}
}}
""")
    proc = subprocess.Popen([binary, "-c", str(conf), "-p", str(folder), "-e", str(folder / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description="A neutral fast OpenAI-compatible stub (raw asyncio + httptools).")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port (printed on the first line)")
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.run(serve(args.host, args.port))
    except ImportError:
        asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
