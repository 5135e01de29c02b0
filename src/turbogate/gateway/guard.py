"""A connection guard on uvicorn's httptools protocol: limits enforced before any key is read.

httptools has no header-size limit and uvicorn has no header or body read timeout, so a client
could hold memory (an unfinished 8 MiB header) or connections (a half-sent request, a
``Content-Length`` larger than the body) for as long as it liked.  This subclass adds:

- ``max_header_bytes``: the request line and headers; over it → 431, connection closed;
- ``header_timeout_s``: from a connection's (or a request's) first byte to the end of its
  headers, and from accept to the first byte; over it → 408 (or a silent close if nothing came);
- ``body_timeout_s`` / ``min_body_rate_bytes_s``: a body must not stall for ``body_timeout_s``
  and, after that grace, must average at least the rate floor; else → 408.

Protocol-level refusals (these, and httptools' parse errors) answer the OpenAI error shape.
The limits are read from the app's ``GatewayConfig`` (``limits``), so every worker has them.

Each request also does less than under uvicorn's own protocol: it runs in the leaner cycle of
gateway/cycle.py (head and body in one write, one header check), and the keep-alive timeout is
the sweeper's (an idle connection is closed at its next sweep past the timeout), so no timer is
armed after every response only for the next request to cancel it.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from turbogate.asgi import AsgiApp, Receive, Scope, Send, error_body, send_error
from turbogate.config import GatewayConfig, Limits
from turbogate.gateway.busypoll import IdlePoll
from turbogate.gateway.cycle import LeanCycle, RequestEvent
from turbogate.gateway.sweeper import Sweeper
from turbogate.sched.refusals import BY_HTTP, OVER_CONCURRENCY

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
_END = b"\r\n\r\n"
_LINGER_S = 2.0
_SWEEP_S = 0.5


def _gateway_of(app: Any) -> Any:
    """The app behind uvicorn's wrappers whose ``config`` is a gateway's (None for any other app)."""
    for _ in range(8):
        config = getattr(app, "config", None)
        if isinstance(config, GatewayConfig):
            return app
        app = getattr(app, "app", None)
        if app is None:
            break
    return None


_SWEEPER = Sweeper(_SWEEP_S)
#: uvicorn's connection cap frees a place when any answer ends, a moment the server cannot
#: predict: come back after the shortest wait the header can say.
_OVER_CONCURRENCY_RETRY_S = 1


def _over_concurrency(gateway: Any) -> Any:
    """The answer over uvicorn's ``limit_concurrency`` (its own is a bare 503): the OpenAI error
    with ``Retry-After``, counted in the gateway's requests and sheds (no key read: tenant ``-``)."""
    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        if gateway is not None:
            gateway.metrics.count("-", "-", "-", 503)
            gateway.metrics.shed.labels(OVER_CONCURRENCY, "-", BY_HTTP).inc()
        await send_error(send, 503, "the gateway is at its connection limit (limit_concurrency); retry shortly",
                         code=OVER_CONCURRENCY, headers=[(b"retry-after", str(_OVER_CONCURRENCY_RETRY_S).encode())])
    return refuse
_HEADERS, _BODY, _OTHER = 0, 1, 2  # what the connection's next bytes are
#: 0 for ``?%#``: a request target without them is its own path (no query to split, nothing to
#: unquote).  Translating and looking for 0 tells all three apart in one pass over the target.
_PATH_BYTES = bytes(0 if c in b"?%#" else 1 for c in range(256))


def _normalized(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """uvicorn's header list: names lower-cased, and a value's trailing whitespace (which llhttp
    keeps and RFC 9110 excludes) cut, with a call only for a value that ends in one: its last
    byte is read, never the whole value searched, as the usual value ends in neither."""
    out = []
    for name, value in headers:
        if value and (value[-1] == 32 or value[-1] == 9):  # a space or a tab
            value = value.rstrip(b" \t")
        out.append((name.lower(), value))
    return out


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    cycle: LeanCycle | None  # type: ignore[assignment]  # the only cycle it makes (None until a request, as in uvicorn)
    url: bytes  # the request target so far (set by on_message_begin; uvicorn declares it nowhere)
    # uvicorn's own attributes that a request reads, declared here so a compiled build keeps them
    # in the object's own fields (a read is a C field, not a lookup in the instance's dict).  Any
    # where uvicorn starts one as None or gives it a type a compiled check would refuse.
    config: Any
    loop: Any
    logger: Any
    parser: Any
    app_state: dict[str, Any]
    server_state: Any
    connections: Any
    tasks: Any
    root_path: str
    limit_concurrency: Any
    asgi_version: Any
    transport: Any
    flow: Any
    server: Any
    client: Any
    scheme: Any
    pipeline: Any
    scope: Any
    headers: Any
    expect_100_continue: bool

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        limits = getattr(config, "_turbogate_limits", None)
        if limits is None:
            gateway = _gateway_of(self.app)
            limits = config._turbogate_limits = (gateway.config.limits if gateway is not None
                                                 else Limits.model_validate({}))
            # The app's poller for its event loop, made at its start-up (gateway/busypoll.py): a
            # client's bytes are one of the events it learns from.
            config._turbogate_poller = getattr(gateway, "idle_poll", None)
            # An AsgiApp's HTTP requests go straight to its handle_http (what its __call__ would
            # await for an "http" scope): one coroutine less per request.
            app = self.app
            config._turbogate_http_app = app.handle_http if isinstance(app, AsgiApp) else app
            config._turbogate_over_concurrency = _over_concurrency(gateway)
        self._http_app = config._turbogate_http_app
        self._over_concurrency_app = config._turbogate_over_concurrency
        self._idle_poll: IdlePoll | None = config._turbogate_poller
        self._max_header = limits.max_header_bytes
        # uvicorn types its keep-alive timeout int, and a float comes: a compiled build checks the type it reads.
        self._keep_alive_s = float(config.timeout_keep_alive)
        self._header_timeout = limits.header_timeout_s
        self._body_timeout = limits.body_timeout_s
        self._min_rate = limits.min_body_rate_bytes_s
        self._phase = _HEADERS
        self._fresh = True  # no request yet: a silent connection is closed after the header timeout
        self._header_bytes = 0
        self._since = time.monotonic()  # when the current headers (or body) began
        self._last = 0.0  # when the last body byte came
        self._body_bytes = 0
        self._discarding = False  # refused: what still comes is read and dropped until the close
        self._idle_since: float | None = None  # between requests of a kept-alive connection: since when

    # ---- uvicorn's Protocol interface -----------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._since = time.monotonic()
        _SWEEPER.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        _SWEEPER.live.discard(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        self._idle_since = None
        if self._idle_poll is not None:
            self._idle_poll.kick(time.perf_counter())
        if self._phase == _HEADERS:
            if self._header_bytes == 0 and not self._fresh:
                self._since = time.monotonic()  # a kept-alive connection's next request begins
            end = data.find(_END)
            seen = self._header_bytes + (len(data) if end < 0 else end)
            if seen > self._max_header:
                self._refuse(431, f"request headers are over the limit of {self._max_header} bytes",
                             "headers_too_large")
                return
            self._header_bytes = seen
        elif self._phase == _BODY:
            self._body_bytes += len(data)
            self._last = time.monotonic()
        # uvicorn's data_received, without its keep-alive timer check (the sweeper keeps that timeout).
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

    def handle_websocket_upgrade(self) -> None:
        # The WebSocket protocol (lease heartbeats) owns the connection now; this protocol never sees its
        # connection_lost, so stop watching it here or it would stay in the sweeper's set for good.
        _SWEEPER.live.discard(self)
        self._phase = _OTHER
        super().handle_websocket_upgrade()

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, "the request is not valid HTTP/1.1", "invalid_http")

    # ---- parser callbacks -----------------------------------------------------------------------
    # on_message_begin and on_url are uvicorn's own, here so a compiled build runs them as C (they
    # ran as the last interpreted Python of a request's parse); on_header only collects, and the
    # headers are normalised as uvicorn's does once they end (_normalized).
    def on_message_begin(self) -> None:
        self.url = b""
        self.expect_100_continue = False
        headers: list[tuple[bytes, bytes]] = []
        self.headers = headers
        self.scope = {  # the rest comes with the headers
            "type": "http", "asgi": {"version": self.asgi_version, "spec_version": "2.3"}, "http_version": "1.1",
            "server": self.server, "client": self.client, "scheme": self.scheme,
            "root_path": self.root_path, "headers": headers, "state": self.app_state.copy()}

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))  # as sent: normalised all at once when the headers end

    def on_headers_complete(self) -> None:
        # Every request is watched as if a body followed; one without a body completes at once.
        self._phase = _BODY
        self._fresh = False
        self._since = self._last = time.monotonic()
        self._body_bytes = 0
        # uvicorn's own on_headers_complete, with the leaner cycle (gateway/cycle.py).
        parser, scope = self.parser, self.scope
        if self.headers:
            headers = self.headers = scope["headers"] = _normalized(self.headers)
            for name, value in headers:
                if name == b"expect" and value.lower() == b"100-continue":
                    self.expect_100_continue = True
        http_version = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        url = self.url
        if url[:1] == b"/" and 0 not in url.translate(_PATH_BYTES):  # the usual path: no parse
            raw_path, query = url, b""
        else:
            parsed_url = httptools.parse_url(url)
            raw_path, query = parsed_url.path, parsed_url.query or b""
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        if self.root_path:
            scope["path"] = self.root_path + path
            scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        else:
            scope["path"], scope["raw_path"] = path, raw_path
        scope["query_string"] = query
        app = self._http_app
        if self.limit_concurrency is not None and (
                len(self.connections) >= self.limit_concurrency or len(self.tasks) >= self.limit_concurrency):
            app = self._over_concurrency_app
            self.logger.warning("Exceeded concurrency limit.")
        existing = self.cycle
        cycle = self.cycle = LeanCycle(scope, self.transport, self.flow, self.logger, RequestEvent(),
                                       self.expect_100_continue,
                                       http_version != "1.0" and parser.should_keep_alive(), self.on_response_complete,
                                       self.loop)
        if existing is not None and not existing.response_complete:  # pipelined: waits for the one before it
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))
        elif self.config.reset_contextvars:
            self._start_asgi_task(cycle, app)
        else:  # uvicorn's _start_asgi_task, inline
            task = self.loop.create_task(cycle.run_asgi(app))
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)

    def on_body(self, body: bytes) -> None:  # uvicorn's, with the event's set() called once
        cycle = self.cycle  # (None for an upgrade)
        if cycle is None or (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        cycle.body += body
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        if not cycle.message_event.value:
            cycle.message_event.set()

    def on_message_complete(self) -> None:
        self._phase = _HEADERS
        self._header_bytes = 0
        cycle = self.cycle  # uvicorn's own from here
        if cycle is None or (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        cycle.more_body = False
        if not cycle.message_event.value:  # (a body just set it: the usual case)
            cycle.message_event.set()

    def on_response_complete(self) -> None:
        if self._phase == _BODY:  # answered without reading its whole body (e.g. a 413): stop watching it
            self._phase = _OTHER
        # uvicorn's own, but the keep-alive timeout is the sweeper's (no timer per response).
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        flow = self.flow
        if flow.read_paused:  # (uvicorn's resume_reading() checks the same, as a Python call)
            flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._idle_since = time.monotonic()

    # ---- deadlines (the sweeper) ----------------------------------------------------------------
    def check(self, now: float) -> None:
        if self._discarding or self.transport.is_closing():
            return
        if self.flow.read_paused:  # we stopped reading (a pipelined request waits its turn): not the client's stall
            self._since = self._last = now
            return
        idle = self._idle_since
        if idle is not None:  # answered, nothing new since: the keep-alive timeout's
            if now - idle >= self._keep_alive_s:
                self.transport.close()
            return
        if self._phase == _HEADERS:
            if self._header_bytes == 0 and not self._fresh:
                return  # idle between requests, and still within the keep-alive timeout
            if now - self._since < self._header_timeout:
                return
            if self._header_bytes == 0:  # nothing came: close quietly, as a keep-alive timeout would
                self.transport.close()
                return
            self._refuse(408, f"the request headers did not arrive within {self._header_timeout:g}s",
                         "request_timeout")
        elif self._phase == _BODY:
            elapsed = now - self._since
            stalled = now - self._last >= self._body_timeout
            slow = elapsed >= self._body_timeout and self._body_bytes < self._min_rate * elapsed
            if stalled or slow:
                self._refuse(408, "the request body stopped or came slower than "
                             f"{self._min_rate:g} bytes/s", "request_timeout")

    # ---- refusing -------------------------------------------------------------------------------
    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer ``status`` in the OpenAI error shape (unless a response has begun) and close."""
        self._phase = _OTHER
        cycle = self.cycle
        started = cycle is not None and not cycle.response_complete and cycle.response_started
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's receive() now says the client left; its sends are dropped
            cycle.keep_alive = False
            cycle.message_event.set()
        transport = self.transport
        if started or transport.is_closing():
            transport.close()
            return
        body = error_body(status, message, code=code)
        transport.write(b"".join([
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body),
            body]))
        # A lingering close: closing with unread bytes would send a reset that can destroy the
        # answer before the client reads it, so stop our side, drop what still comes, close soon.
        self._discarding = True
        self.flow.resume_reading()
        if transport.can_write_eof():
            transport.write_eof()
        self.loop.call_later(_LINGER_S, transport.close)
