"""A lean HTTP/1.1 client for the engines: keep-alive connection pools per replica on asyncio
protocols with httptools' response parser.

Measured against aiohttp's client in the same proxy (benchmarks/gateway_overhead.py and
docs/gateway.md): aiohttp spent several times more CPU per proxied request, and per-request CPU
is what bounds a one-worker gateway.  This client does only what the gateway needs: POST/GET
with a body, status + content type, the body whole or chunk by chunk (chunked or
content-length), keep-alive reuse, and abort (which closes the connection, so the engine sees
the client leave and stops generating).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from typing import cast
from urllib.parse import urlsplit

import httptools


class UpstreamError(ConnectionError):
    """The connection failed or broke; ``before_response`` tells whether any byte had come,
    ``connect_failed`` whether no connection could be made at all (the replica is down)."""

    def __init__(self, message: str, before_response: bool, connect_failed: bool = False) -> None:
        super().__init__(message)
        self.before_response = before_response
        self.connect_failed = connect_failed


_PAUSE_AT = 64  # buffered chunks before we stop reading from the engine (back-pressure)


class _Conn(asyncio.Protocol):
    __slots__ = ("_chunks", "_complete", "_ct", "_headers_done", "_keep_alive", "_paused", "_pool",
                 "_waiter", "closed", "fresh", "parser", "status", "transport")

    def __init__(self, pool: UpstreamPool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.fresh = False  # True until its first request is sent
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self._ct = b""
        self._headers_done = False
        self._complete = False
        self._keep_alive = True
        self._paused = False
        self._chunks: collections.deque[bytes] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"bad HTTP from engine: {exc}", not self._headers_done))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool._forget(self)
        if not self._complete:
            self._fail(UpstreamError(f"engine closed the connection ({exc or 'EOF'})", not self._headers_done))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 12 and name.lower() == b"content-type":
            self._ct = value

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self._keep_alive = self.parser.should_keep_alive()
        self._headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        if len(self._chunks) >= _PAUSE_AT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._complete = True
        self._wake()

    # helpers
    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    async def _wait(self) -> None:
        if self.closed and not self._complete:
            raise UpstreamError("engine connection closed", not self._headers_done)
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class Response:
    """An engine's answer; read it whole (``read``) or chunk by chunk (``next_chunk``), then
    ``release`` (or ``abort`` to drop the connection and cancel the engine's work)."""

    __slots__ = ("_conn", "_done", "content_type", "status")

    def __init__(self, conn: _Conn) -> None:
        self._conn = conn
        self._done = False
        self.status = 0
        self.content_type = b"application/json"

    def _headers_arrived(self) -> None:
        # Copied now: the connection's own fields are reset when it goes back to the pool.
        self.status = self._conn.status
        self.content_type = self._conn._ct or b"application/json"

    async def next_chunk(self) -> bytes:
        """The next piece of the body, ``b""`` once it is complete."""
        conn = self._conn
        while True:
            if conn._chunks:
                chunk = conn._chunks.popleft()
                if conn._paused and len(conn._chunks) < _PAUSE_AT // 2 and conn.transport is not None:
                    conn._paused = False
                    conn.transport.resume_reading()
                return chunk
            if conn._complete:
                return b""
            await conn._wait()

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.next_chunk():
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def release(self) -> None:
        """Hand the connection back for reuse if the answer was complete, else drop it."""
        if self._done:
            return
        self._done = True
        conn = self._conn
        if conn._complete and conn._keep_alive and not conn.closed:
            conn._reset()
            conn._pool._idle.append(conn)
        else:
            conn.abort()

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._conn.abort()


class UpstreamPool:
    """Keep-alive connections to one replica (``base_url`` like ``http://10.0.0.5:8000``)."""

    def __init__(self, base_url: str, connect_timeout_s: float = 2.0, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"engine URL must be http:// or https://, not {base_url}")
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self._ssl else 80)
        self.prefix = parts.path.rstrip("/")
        self._host_header = f"{self.host}:{self.port}".encode()
        # Extra headers sent with every request (e.g. an engine's API key), formatted once.
        self._extra = b"".join(f"{k}: {v}\r\n".encode() for k, v in (headers or {}).items())
        self.connect_timeout_s = connect_timeout_s
        self._idle: collections.deque[_Conn] = collections.deque()

    def _forget(self, conn: _Conn) -> None:
        with contextlib.suppress(ValueError):  # it was in use, not idle
            self._idle.remove(conn)

    async def _connect(self, reuse: bool = True) -> _Conn:
        while reuse and self._idle:
            conn = self._idle.pop()  # most recently used: the warmest socket
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Conn(self), self.host, self.port, ssl=self._ssl),
                self.connect_timeout_s,
            )
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc}", True, True) from None
        conn.fresh = True
        return conn

    async def request(self, method: bytes, path: str, body: bytes = b"",
                      content_type: bytes = b"application/json") -> Response:
        """Send a request and wait for the response headers.  A kept-alive connection that the
        engine closed as we reused it (its idle timeout raced our request) is retried once on
        a fresh connection: the engine never saw that request, and it says nothing about the
        replica's health."""
        conn = await self._connect()
        if conn.fresh:
            return await self._send(conn, method, path, body, content_type)
        try:
            return await self._send(conn, method, path, body, content_type)
        except UpstreamError as exc:
            if not exc.before_response:
                raise
        return await self._send(await self._connect(reuse=False), method, path, body, content_type)

    async def _send(self, conn: _Conn, method: bytes, path: str, body: bytes, content_type: bytes) -> Response:
        conn.fresh = False
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (
            method, (self.prefix + path).encode(), self._host_header, content_type, len(body), self._extra)
        assert conn.transport is not None
        conn.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            conn.transport.write(body)
        response = Response(conn)
        try:
            while not conn._headers_done:
                await conn._wait()
        except BaseException:
            response.abort()
            raise
        response._headers_arrived()
        return response

    def close(self) -> None:
        while self._idle:
            self._idle.pop().abort()
