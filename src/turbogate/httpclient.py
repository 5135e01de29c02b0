"""The lean HTTP/1.1 client shared by the gateway (to the engines) and the bench (to its target):
keep-alive connection pools per base URL on asyncio protocols with httptools' response parser.

Measured against aiohttp's client (benchmarks/gateway_overhead.py, docs/gateway.md): aiohttp
spent several times more CPU per request, and per-request CPU is what bounds a one-worker gateway
and how fast one bench process can send on time.  Only what both need: a request with a body and
extra headers, status + content type + selected response headers, the body whole or chunk by
chunk (chunked, content-length or until close) with each chunk's arrival time, keep-alive reuse,
an optional total timeout, and abort (which closes the connection, so the engine sees the client
leave and stops generating).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from turbogate.errors import UpstreamError
from turbogate.sched.resend import resend_on_new_connection

_PAUSE_AT = 64  # buffered chunks before we stop reading from the server (back-pressure)


class _Conn(asyncio.Protocol):
    __slots__ = ("_chunks", "_complete", "_ct", "_error", "_framed", "_headers", "_headers_done", "_keep_alive",
                 "_loop", "_now", "_paused", "_pool", "_timer", "_waiter", "closed", "completed_at", "fresh", "parser",
                 "status", "transport")

    def __init__(self, pool: UpstreamPool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.fresh = False  # True until its first request is sent
        self._now = 0.0  # when the bytes being parsed arrived
        self._paused = False  # reading paused for back-pressure (``_reset`` resumes it)
        self._headers: dict[str, str] = {}
        self._chunks: collections.deque[tuple[bytes, float]] = collections.deque()
        self._reset()

    def _reset(self) -> None:
        if self._paused and self.transport is not None:
            # An answer can come whole while reading is paused and be left unread (its client
            # left): a connection made ready for its next answer must read again.
            self.transport.resume_reading()
        self.status = 0
        self._ct = b""
        if self._headers:  # a Response holds the last answer's: a new one (the usual empty one is kept)
            self._headers = {}
        self._framed = False  # Content-Length or Transfer-Encoding seen (else the body ends at close)
        self._headers_done = False
        self._complete = False
        self.completed_at = 0.0
        self._keep_alive = True
        self._paused = False
        self._chunks.clear()  # (read whole or dropped by now: nothing else holds it)
        self._waiter: asyncio.Future[None] | None = None
        self._error: UpstreamError | None = None
        self._timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass
        # Kept for the futures and timers of its requests: looking the loop up per request costs a
        # system call (the interpreter's check that no fork happened).
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        # One clock read per read from the socket: every chunk parsed from it arrived then.
        self._now = time.perf_counter()
        on_data = self._pool.on_data
        if on_data is not None:
            on_data(self._now)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"bad HTTP from the server: {exc}", not self._headers_done))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool._forget(self)
        if self._complete:
            return
        if self._headers_done and not self._framed and self._error is None:
            # A body without length or chunking ends when the server closes the connection.
            self._now = time.perf_counter()
            self._keep_alive = False
            self.on_message_complete()
            return
        self._fail(UpstreamError(f"the server closed the connection ({exc or 'EOF'})", not self._headers_done))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        n = len(name)
        if n == 12 and name.lower() == b"content-type":
            self._ct = value
        elif (n == 14 or n == 17) and name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True
        keep = self._pool._keep_headers
        if keep is not None and (key := name.lower()) in keep:
            self._headers[key.decode("latin-1")] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self._keep_alive = self.parser.should_keep_alive()
        self._headers_done = True
        waiter = self._waiter  # wake the request (inline: three parser callbacks a request)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append((body, self._now))
        if len(self._chunks) >= _PAUSE_AT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_message_complete(self) -> None:
        self._complete = True
        self.completed_at = self._now
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # helpers
    def _fail(self, exc: UpstreamError) -> None:
        if self._error is None:
            self._error = exc
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _time_out(self, timeout_s: float) -> None:
        self._timer = None
        if not self._complete:
            self._fail(UpstreamError(f"no complete answer within {timeout_s:g}s", not self._headers_done,
                                     timed_out=True))
            self.abort()

    async def _wait(self) -> None:
        if self.closed and not self._complete:
            raise self._error or UpstreamError("the connection closed", not self._headers_done)
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def abort(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.abort()


class Response:
    """A server's answer; read it whole (``read``) or chunk by chunk (``next_chunk``), then
    ``release`` (or ``abort`` to drop the connection and cancel the server's work).

    ``headers`` holds the response headers the pool was asked to keep (lower-case names);
    ``chunk_at`` is the arrival time (``time.perf_counter()``) of the chunk ``next_chunk`` last
    returned, ``completed_at`` that of the bytes that completed the answer (once ``next_chunk``
    has returned ``b""``)."""

    __slots__ = ("_conn", "_done", "chunk_at", "completed_at", "content_type", "headers", "status")

    def __init__(self, conn: _Conn) -> None:
        self._conn = conn
        self._done = False
        self.status = 0
        self.content_type = b"application/json"
        self.headers: dict[str, str] = {}
        self.chunk_at = 0.0
        self.completed_at = 0.0

    def _headers_arrived(self) -> None:
        # Copied now: the connection's own fields are reset when it goes back to the pool.
        conn = self._conn
        self.status = conn.status
        self.content_type = conn._ct or b"application/json"
        self.headers = conn._headers

    async def next_chunk(self) -> bytes:
        """The next piece of the body, ``b""`` once it is complete."""
        conn = self._conn
        while True:
            if conn._chunks:
                chunk, self.chunk_at = conn._chunks.popleft()
                if conn._paused and len(conn._chunks) < _PAUSE_AT // 2 and conn.transport is not None:
                    conn._paused = False
                    conn.transport.resume_reading()
                return chunk
            if conn._complete:
                self.completed_at = conn.completed_at
                return b""
            await conn._wait()

    def take_body(self) -> bytes | None:
        """The whole body if all of it has come (the usual small answer), else ``None`` (then
        ``read`` waits for it): no coroutine for an answer that needs no waiting."""
        conn = self._conn
        if not conn._complete:
            return None
        chunks = conn._chunks
        parts = [chunk for chunk, _ in chunks]
        if chunks:
            self.chunk_at = chunks[-1][1]
            chunks.clear()
        self.completed_at = conn.completed_at
        if conn._paused and conn.transport is not None:
            conn._paused = False
            conn.transport.resume_reading()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def read(self) -> bytes:
        body = self.take_body()
        if body is not None:
            return body
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
    """Keep-alive connections to one server (``base_url`` like ``http://10.0.0.5:8000``), grown on
    demand.  ``headers`` are sent with every request; ``keep_headers`` names (any case) the
    response headers to keep in :attr:`Response.headers` (none by default: the cheapest).

    ``tos``: the IP TOS byte (DSCP << 2) every connection of this pool is marked with, set on the
    socket before it connects so even the handshake carries it.  A mark is per pool, not per
    request: a kept-alive connection never changes class, so a caller wanting several marks to
    one server keeps one pool per mark (the gateway: one per marked tier)."""

    def __init__(self, base_url: str, connect_timeout_s: float = 2.0, headers: Mapping[str, str] | None = None,
                 keep_headers: Iterable[str] | None = None, tos: int | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"the URL must be http:// or https://, not {base_url}")
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self._ssl else 80)
        self.prefix = parts.path.rstrip("/")
        self._host_header = f"{self.host}:{self.port}".encode()
        # Extra headers sent with every request (e.g. an engine's API key), formatted once.
        self._extra = format_headers(headers or {})
        self._keep_headers = (frozenset(h.lower().encode("latin-1") for h in keep_headers)
                              if keep_headers is not None else None)
        self.connect_timeout_s = connect_timeout_s
        if tos is not None and not 0 <= tos <= 255:
            raise ValueError(f"tos must be a byte (0-255), not {tos}")
        self.tos = tos
        self._idle: collections.deque[_Conn] = collections.deque()
        #: Called with its arrival time as each read from a connection begins (the gateway's poller
        #: learns from it: gateway/busypoll.py); None: nothing.
        self.on_data: Callable[[float], None] | None = None

    def _forget(self, conn: _Conn) -> None:
        with contextlib.suppress(ValueError):  # it was in use, not idle
            self._idle.remove(conn)

    def _take_idle(self) -> _Conn | None:
        while self._idle:
            conn = self._idle.pop()  # most recently used: the warmest socket
            if not conn.closed:
                return conn
        return None

    async def _connect(self, reuse: bool = True) -> _Conn:
        if reuse:
            idle = self._take_idle()
            if idle is not None:
                return idle
        loop = asyncio.get_running_loop()
        try:
            connecting: Awaitable[tuple[asyncio.BaseTransport, _Conn]]
            if self.tos is None:
                connecting = loop.create_connection(lambda: _Conn(self), self.host, self.port, ssl=self._ssl)
            else:
                connecting = self._connect_marked(loop)
            _, conn = await asyncio.wait_for(connecting, self.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc}", True, True) from None
        conn.fresh = True
        return conn

    async def _connect_marked(self, loop: asyncio.AbstractEventLoop) -> tuple[asyncio.BaseTransport, _Conn]:
        """Connect a socket that carries ``self.tos`` from its first packet (the SYN)."""
        assert self.tos is not None
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        error: OSError = OSError(f"no address for {self.host}")
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, self.tos)
                else:
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.tos)
                await loop.sock_connect(sock, address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:  # cancelled (the connect timeout): do not leak the socket
                sock.close()
                raise
            return await loop.create_connection(lambda: _Conn(self), sock=sock, ssl=self._ssl,
                                                server_hostname=self.host if self._ssl else None)
        raise error

    async def request(self, method: bytes, path: str, body: bytes = b"", content_type: bytes = b"application/json",
                      headers: bytes = b"", timeout_s: float | None = None) -> Response:
        """Send a request and wait for the response headers.  ``headers``: extra request headers
        for this request only, formatted (see :func:`format_headers`).  ``timeout_s``: from the
        send to the complete answer; when it runs out the connection is aborted and the waiting
        call raises :class:`UpstreamError` with ``timed_out``.

        A failure on a kept-alive connection before any byte of the answer is sent once more on
        a new connection, unseen by the caller: the rule and why are
        ``turbogate.sched.resend.resend_on_new_connection``'s."""
        conn = self._take_idle() or await self._connect(reuse=False)  # no coroutine for the usual reuse
        while True:
            reused = not conn.fresh
            response = self._send(conn, method, path, body, content_type, headers, timeout_s)
            try:
                while not conn._headers_done:  # (Conn._wait inlined: one coroutine less per request)
                    if conn.closed and not conn._complete:
                        raise conn._error or UpstreamError("the connection closed", not conn._headers_done)
                    waiter = conn._waiter = conn._loop.create_future()
                    try:
                        await waiter
                    finally:
                        conn._waiter = None
            except UpstreamError as exc:
                response.abort()
                if not resend_on_new_connection(reused, exc.before_response, exc.timed_out):
                    raise
                conn = await self._connect(reuse=False)
                continue
            except BaseException:
                response.abort()
                raise
            response._headers_arrived()
            return response

    def _send(self, conn: _Conn, method: bytes, path: str, body: bytes, content_type: bytes,
              headers: bytes, timeout_s: float | None) -> Response:
        """Write the request on ``conn``; its response, whose headers are still to come."""
        conn.fresh = False
        head = b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%s\r\n" % (
            method, (self.prefix + path).encode(), self._host_header, content_type, len(body), self._extra, headers)
        assert conn.transport is not None
        conn.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            conn.transport.write(body)
        if timeout_s is not None:
            # A plain timer rather than asyncio.wait_for: one handle, no extra task per request.
            conn._timer = conn._loop.call_later(timeout_s, conn._time_out, timeout_s)
        return Response(conn)

    def close(self) -> None:
        while self._idle:
            self._idle.pop().abort()


def format_headers(headers: Mapping[str, str]) -> bytes:
    """``{"Authorization": "Bearer k"}`` → ``b"Authorization: Bearer k\\r\\n"`` for :meth:`UpstreamPool.request`."""
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
