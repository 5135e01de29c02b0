"""A lean HTTP/1.1 keep-alive client on ``asyncio.Protocol`` for plain-HTTP targets.

Why: a load generator's own cost per request bounds the rate it can send on time.  aiohttp's
general machinery (a coroutine per read, a stream reader per response) costs about a millisecond
per streamed request; parsing bytes as they arrive in ``data_received`` — status line, headers,
chunked or sized body, SSE events — costs a fraction of that.  Only what a benchmark needs:
POST with a JSON body, keep-alive reuse, chunked / Content-Length / until-close bodies,
a total timeout.  ``https://`` targets use aiohttp instead (see runner).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

from turbogate.bench.client import (
    TIER_HEADER,
    Outcome,
    SSEReader,
    error_message,
    finish_plain,
    normalize_tier,
    parse_server_timing,
)

_TIMED_OUT = "timeout"


def _expire(fut: asyncio.Future[str | None]) -> None:
    if not fut.done():
        fut.set_result(_TIMED_OUT)


class _Exchange:
    """One request/response on a connection: parses the response as bytes arrive."""

    __slots__ = ("_body", "_buf", "_chunk_left", "_length", "_mode", "_state", "close_after", "future", "headers",
                 "out", "reader", "stream")

    def __init__(self, out: Outcome, stream: bool, future: asyncio.Future[str | None]) -> None:
        self.out = out
        self.stream = stream
        self.future = future
        self.reader: SSEReader | None = None
        self.headers: dict[str, str] = {}
        self.close_after = False
        self._buf = b""
        self._state = 0  # 0 head, 1 body, 2 done
        self._mode = ""  # "chunked" | "length" | "close"
        self._length = 0
        self._chunk_left = -1  # -1: expecting a chunk-size line
        self._body: list[bytes] = []

    # ---- parsing ------------------------------------------------------------------------------

    def feed(self, data: bytes, now: float) -> None:
        if self._state == 0:
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, rest = self._buf[:end], self._buf[end + 4:]
            self._buf = b""
            self._head(head)
            self._state = 1
            if not rest:
                if self._mode == "length" and self._length == 0:
                    self._complete(now)
                return
            data = rest
        if self._state == 1:
            if self._mode == "chunked":
                self._chunked(data, now)
            elif self._mode == "length":
                self._length -= len(data)
                self._payload(data, now)
                if self._length <= 0:
                    self._complete(now)
            else:
                self._payload(data, now)

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        self.out.status = int(parts[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        h = self.headers
        if "chunked" in h.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in h:
            self._mode, self._length = "length", int(h["content-length"])
        else:
            self._mode, self.close_after = "close", True
        if h.get("connection", "").lower() == "close":
            self.close_after = True
        out = self.out
        out.server_timing = parse_server_timing(h.get("server-timing"))
        out.tier_served = normalize_tier(h.get(TIER_HEADER.lower()))
        out.replica = h.get("x-turbogate-replica")
        if self.stream and out.status == 200:
            self.reader = SSEReader(out)

    def _chunked(self, data: bytes, now: float) -> None:
        buf = self._buf + data
        pos = 0
        n = len(buf)
        while pos < n:
            if self._chunk_left < 0:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
                pos = eol + 2
                if size == 0:
                    self._buf = b""
                    self._complete(now)
                    return
                self._chunk_left = size
            take = min(self._chunk_left, n - pos)
            if take:
                self._payload(buf[pos:pos + take], now)
                pos += take
                self._chunk_left -= take
            if self._chunk_left == 0:
                if n - pos < 2:
                    break
                pos += 2  # the CRLF after the chunk data
                self._chunk_left = -1
        self._buf = buf[pos:]

    def _payload(self, data: bytes, now: float) -> None:
        if self.reader is not None:
            self.reader.feed(data, now)
        else:
            self._body.append(data)

    def _complete(self, now: float) -> None:
        if self._state == 2:
            return
        self._state = 2
        out = self.out
        out.end = now
        try:
            if out.status != 200:
                out.error = f"HTTP {out.status}: {error_message(b''.join(self._body))}"
            elif self.reader is not None:
                self.reader.finish()
            else:
                finish_plain(b"".join(self._body), now, out)
        except ValueError as exc:  # bad JSON (orjson.JSONDecodeError is a ValueError)
            out.error = f"{type(exc).__name__}: {exc}"[:300]
            out.ok = False
        if not self.future.done():
            self.future.set_result(None)

    def lost(self, exc: BaseException | None) -> None:
        """The connection closed: the end of an until-close body, or a failure."""
        if self._state == 2:
            return
        if self._state == 1 and self._mode == "close":
            self._complete(time.perf_counter())
            return
        self._state = 2
        self.out.end = time.perf_counter()
        self.out.error = f"connection lost: {exc}" if exc else "connection closed before the response ended"
        self.out.ok = False
        if not self.future.done():
            self.future.set_result(None)


class _Conn(asyncio.Protocol):
    __slots__ = ("exchange", "pool", "transport")

    def __init__(self, pool: Http11Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        if ex is not None:
            ex.feed(data, time.perf_counter())

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.exchange is not None:
            self.exchange.lost(exc)
        self.pool.forget(self)


class Http11Pool:
    """Keep-alive connections to one ``http://host:port``, grown on demand, never capped."""

    def __init__(self, base_url: str, connect_timeout: float = 10.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http":
            raise ValueError(f"Http11Pool serves http:// only, got {base_url!r}")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.host_header = f"{self.host}:{self.port}"
        self.connect_timeout = connect_timeout
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()

    def forget(self, conn: _Conn) -> None:
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    async def _acquire(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()
            if conn.transport is not None and not conn.transport.is_closing():
                return conn
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: _Conn(self), self.host, self.port), self.connect_timeout)
        self._all.add(conn)
        return conn

    async def post(self, path: str, payload: bytes, headers: Mapping[str, str], stream: bool,
                   timeout: float) -> Outcome:
        """POST ``payload`` and time the answer; never raises for network errors (cancellation passes)."""
        head = [f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.host_header}\r\nContent-Length: {len(payload)}\r\n"]
        head.extend(f"{k}: {v}\r\n" for k, v in headers.items())
        head.append("\r\n")
        request = "".join(head).encode("latin-1") + payload
        loop = asyncio.get_running_loop()
        sent = time.perf_counter()
        out = Outcome(sent=sent, end=sent)
        conn: _Conn | None = None
        timer: asyncio.TimerHandle | None = None
        try:
            conn = await self._acquire()
            fut: asyncio.Future[str | None] = loop.create_future()
            ex = _Exchange(out, stream, fut)
            conn.exchange = ex
            if conn.transport is None:
                raise ConnectionResetError("connection closed before the request was written")
            conn.transport.write(request)
            # A plain timer instead of asyncio.wait_for: one handle, no extra task per request.
            timer = loop.call_later(timeout, _expire, fut)
            await fut
            if fut.result() is not None:
                raise TimeoutError(f"no complete answer within {timeout:g}s")
        except (TimeoutError, OSError) as exc:
            out.end = time.perf_counter()
            out.error = f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
            out.ok = False
            if conn is not None and conn.transport is not None:
                conn.transport.abort()
            return out
        except asyncio.CancelledError:
            if conn is not None and conn.transport is not None:
                conn.transport.abort()
            raise
        finally:
            if timer is not None:
                timer.cancel()
        conn.exchange = None
        if ex.close_after or conn.transport is None or conn.transport.is_closing():
            if conn.transport is not None:
                conn.transport.close()
        else:
            self._idle.append(conn)
        return out

    def close(self) -> None:
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._idle.clear()
