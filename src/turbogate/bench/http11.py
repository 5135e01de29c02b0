"""The bench's lean HTTP/1.1 client: keep-alive connections whose only work per received chunk is
to keep its bytes and arrival time; the answer is parsed once, when it is complete.

Why its own protocol rather than the gateway's (turbogate.httpclient): a load generator must send
on time whatever its responses are doing.  The gateway's client wakes the reading coroutine on
every chunk (it has to forward each one at once); at 1,000 streams a second of 8 chunks that is
8,000 task wake-ups a second competing with the dispatcher, and a burst of them made scheduled
sends late.  Here a chunk costs two list appends inside ``data_received`` and the coroutine of a
request wakes once, at the end.  And :meth:`Http11Pool.send_now` writes a request synchronously,
from the dispatcher itself, on an idle connection: no task hop between the scheduled time and the
bytes leaving.  ``https://`` targets use aiohttp (see runner).

Parsing is httptools', as in the gateway's client; timing follows :mod:`turbogate.bench.client`
(each chunk is timed by when its bytes arrived, not by when a coroutine woke up).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from turbogate.bench.client import (
    TIER_HEADER,
    Outcome,
    SSEReader,
    error_message,
    finish_plain,
    normalize_tier,
    parse_server_timing,
)
from turbogate.errors import UpstreamError
from turbogate.httpclient import format_headers

_TIER = TIER_HEADER.lower()
_KEEP = frozenset({b"server-timing", _TIER.encode(), b"x-turbogate-replica"})


class Exchange:
    """One request and what came back, as the protocol saw it: bytes and arrival times only.

    When the answer is complete (or failed), ``on_done(exchange)`` is called from the protocol
    callback, or, without one, the future :meth:`wait` awaits is resolved.  ``tag`` is the
    caller's (the runner keeps its schedule item there)."""

    __slots__ = ("complete", "completed_at", "conn", "error", "future", "head", "headers", "on_done", "parts", "path",
                 "payload", "retried", "reused", "sent", "status", "tag", "timeout", "times")

    def __init__(self, path: str, payload: bytes, head: bytes, timeout: float | None, sent: float) -> None:
        self.path, self.payload, self.head, self.timeout, self.sent = path, payload, head, timeout, sent
        self.future: asyncio.Future[None] | None = None
        self.on_done: Callable[[Exchange], None] | None = None
        self.tag: object = None
        self.conn: _TimedConn | None = None
        self.reused = False
        self.retried = False
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.parts: list[bytes] = []
        self.times: list[float] = []
        self.complete = False
        self.completed_at = 0.0
        self.error: UpstreamError | None = None

    @property
    def should_retry(self) -> bool:
        """A kept-alive connection the server closed as we reused it: the server never saw the
        request, so it is sent once more on a fresh connection."""
        e = self.error
        return e is not None and self.reused and not self.retried and e.before_response and not e.timed_out

    def retry(self) -> Exchange:
        ex = Exchange(self.path, self.payload, self.head, self.timeout, self.sent)
        ex.retried = True
        ex.on_done, ex.tag = self.on_done, self.tag
        return ex

    def abort(self) -> None:
        """Drop the connection (the server stops working for us); ``on_done`` is not called."""
        self.on_done = None
        if self.conn is not None and not self.complete:
            self.conn.abort()

    async def wait(self) -> None:
        if self.complete or self.error is not None:
            return
        self.future = asyncio.get_running_loop().create_future()
        await self.future

    def _resolve(self) -> None:
        if self.on_done is not None:
            self.on_done(self)
        elif self.future is not None and not self.future.done():
            self.future.set_result(None)


class _TimedConn(asyncio.Protocol):
    __slots__ = ("_framed", "_headers_done", "_keep_alive", "_now", "_pool", "_timer", "closed", "ex", "parser",
                 "transport")

    def __init__(self, pool: Http11Pool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.ex: Exchange | None = None
        self._now = 0.0
        self._framed = self._headers_done = False
        self._keep_alive = True
        self._timer: asyncio.TimerHandle | None = None

    def start(self, ex: Exchange) -> None:
        """Write ``ex``'s request now (synchronously)."""
        self.ex = ex
        ex.conn = self
        self._framed = self._headers_done = False
        self._keep_alive = True
        assert self.transport is not None
        self.transport.write(ex.head + ex.payload if len(ex.payload) < 65536 else ex.head)
        if len(ex.payload) >= 65536:
            self.transport.write(ex.payload)
        if ex.timeout is not None:
            self._timer = asyncio.get_running_loop().call_later(ex.timeout, self._time_out, ex.timeout)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        self._now = time.perf_counter()  # every chunk parsed from this read arrived now
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"bad HTTP from the server: {exc}")
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool._forget(self)
        ex = self.ex
        if ex is None or ex.complete:
            return
        if self._headers_done and not self._framed and ex.error is None:
            self._now = time.perf_counter()  # a body without length or chunking ends at close
            self._keep_alive = False
            self.on_message_complete()
            return
        self._fail(f"the server closed the connection ({exc or 'EOF'})")

    # httptools callbacks: keep bytes and times, nothing else
    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower()
        if key in (b"content-length", b"transfer-encoding"):
            self._framed = True
        elif key in _KEEP and self.ex is not None:
            self.ex.headers[key] = value

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self._keep_alive = self.parser.should_keep_alive()
        if self.ex is not None:
            self.ex.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        ex = self.ex
        if ex is not None:
            ex.parts.append(body)
            ex.times.append(self._now)

    def on_message_complete(self) -> None:
        ex = self.ex
        if ex is None:
            return
        ex.complete = True
        ex.completed_at = self._now
        self._cancel_timer()
        self.ex = None
        if self._keep_alive and not self.closed:
            self._pool._idle.append(self)  # reusable at once, before the request's coroutine wakes
        else:
            self.abort()
        ex._resolve()

    # helpers
    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fail(self, message: str, timed_out: bool = False) -> None:
        ex = self.ex
        if ex is not None and ex.error is None and not ex.complete:
            ex.error = UpstreamError(message, not self._headers_done, timed_out=timed_out)
            ex._resolve()

    def _time_out(self, timeout_s: float) -> None:
        self._timer = None
        self._fail(f"no complete answer within {timeout_s:g}s", timed_out=True)
        self.abort()

    def abort(self) -> None:
        self.closed = True
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()


class Http11Pool:
    """Keep-alive connections to one ``http://host:port``, grown on demand, never capped."""

    def __init__(self, base_url: str, connect_timeout: float = 10.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http":
            raise ValueError(f"the lean bench client speaks http:// only, not {base_url}")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self._host_header = f"{self.host}:{self.port}".encode()
        self.connect_timeout = connect_timeout
        self._idle: list[_TimedConn] = []

    def _forget(self, conn: _TimedConn) -> None:
        with contextlib.suppress(ValueError):  # it was in use, not idle
            self._idle.remove(conn)

    def head(self, path: str, payload: bytes, headers: Mapping[str, str]) -> bytes:
        """The request line and headers for ``payload`` (``headers``: any case; Content-Type defaults to JSON)."""
        content_type = "application/json"
        extra = {}
        for k, v in headers.items():
            if k.lower() == "content-type":
                content_type = v
            else:
                extra[k] = v
        return b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (
            (self.prefix + path).encode(), self._host_header, content_type.encode("latin-1"), len(payload),
            format_headers(extra))

    def start_now(self, ex: Exchange) -> bool:
        """Write ``ex`` at once on an idle connection; False when there is none (then :meth:`start`)."""
        while self._idle:
            conn = self._idle.pop()  # most recently used: the warmest socket
            if not conn.closed:
                ex.reused = True
                conn.start(ex)
                return True
        return False

    async def start(self, ex: Exchange, fresh: bool = False) -> None:
        """Write ``ex``, on a new connection when no idle one is left (or ``fresh``); raises
        :class:`UpstreamError` when none can be made."""
        if fresh or not self.start_now(ex):
            (await self._connect()).start(ex)

    def send_now(self, path: str, payload: bytes, head: bytes, timeout: float | None) -> Exchange | None:
        """A new exchange written at once on an idle connection; ``None`` when there is none."""
        ex = Exchange(path, payload, head, timeout, time.perf_counter())
        return ex if self.start_now(ex) else None

    async def send(self, path: str, payload: bytes, head: bytes, timeout: float | None,
                   sent: float | None = None) -> Exchange:
        """A new exchange, written on a new connection when no idle one is left (raises :class:`UpstreamError`)."""
        ex = Exchange(path, payload, head, timeout, time.perf_counter() if sent is None else sent)
        await self.start(ex)
        return ex

    async def _connect(self) -> _TimedConn:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _TimedConn(self), self.host, self.port), self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc}", True, True) from None
        return conn

    async def finish(self, ex: Exchange, stream: bool) -> Outcome:
        """Wait for ``ex``'s answer and time it; never raises for network errors (cancellation passes,
        and drops the connection so the server stops working for us)."""
        try:
            await ex.wait()
            if ex.should_retry:
                ex = ex.retry()
                await self.start(ex, fresh=True)
                await ex.wait()
        except UpstreamError as exc:
            return Outcome(sent=ex.sent, end=time.perf_counter(), error=describe(exc))
        except asyncio.CancelledError:
            ex.abort()
            raise
        return self.outcome(ex, stream)

    def outcome(self, ex: Exchange, stream: bool) -> Outcome:
        """Time and parse a finished exchange (all at once: nothing was parsed as it arrived)."""
        out = Outcome(sent=ex.sent, end=ex.sent)
        self._take_headers(ex, out)
        if ex.error is not None:
            out.end = time.perf_counter()
            out.status = ex.status or None
            out.error = describe(ex.error)
            return out
        out.status = status = ex.status
        out.end = ex.completed_at
        try:
            if stream and status == 200:
                reader = SSEReader(out)
                for part, at in zip(ex.parts, ex.times, strict=True):
                    if reader.feed(part, at):
                        break
                reader.finish()
            else:
                body = ex.parts[0] if len(ex.parts) == 1 else b"".join(ex.parts)
                if status != 200:
                    out.error = f"HTTP {status}: {error_message(body)}"
                else:
                    finish_plain(body, out.end, out)
        except ValueError as exc:  # bad JSON (orjson.JSONDecodeError is a ValueError)
            out.error = f"{type(exc).__name__}: {exc}"[:300]
            out.ok = False
        return out

    @staticmethod
    def _take_headers(ex: Exchange, out: Outcome) -> None:
        h = ex.headers
        if not h:
            return
        st = h.get(b"server-timing")
        out.server_timing = parse_server_timing(None if st is None else st.decode("latin-1"))
        tier = h.get(_TIER.encode())
        out.tier_served = normalize_tier(None if tier is None else tier.decode("latin-1"))
        replica = h.get(b"x-turbogate-replica")
        out.replica = None if replica is None else replica.decode("latin-1")

    async def post(self, path: str, payload: bytes, headers: Mapping[str, str], stream: bool,
                   timeout: float) -> Outcome:
        """POST ``payload`` and time the answer; never raises for network errors (cancellation passes)."""
        sent = time.perf_counter()
        try:
            ex = await self.send(path, payload, self.head(path, payload, headers), timeout, sent)
        except UpstreamError as exc:
            now = time.perf_counter()
            return Outcome(sent=sent, end=now, error=describe(exc))
        return await self.finish(ex, stream)

    def close(self) -> None:
        while self._idle:
            self._idle.pop().abort()


def describe(exc: OSError) -> str:
    """``TimeoutError: no complete answer within …``, ``connection lost: …``, or for a failed connect
    ``UpstreamError: cannot connect to host:port: …``."""
    if isinstance(exc, UpstreamError) and exc.timed_out:
        return f"TimeoutError: {exc}"[:300]
    if isinstance(exc, UpstreamError) and not exc.connect_failed:
        return f"connection lost: {exc}"[:300]
    return f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
