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
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from turbogate.asgi import error_body
from turbogate.config import Limits

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
_END = b"\r\n\r\n"
_LINGER_S = 2.0


def _limits_of(app: Any) -> Limits:
    """The ``limits`` of the gateway behind uvicorn's wrappers (defaults for any other app)."""
    for _ in range(8):
        config = getattr(app, "config", None)
        limits = getattr(config, "limits", None)
        if isinstance(limits, Limits):
            return limits
        app = getattr(app, "app", None)
        if app is None:
            break
    return Limits.model_validate({})


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        limits = _limits_of(self.app)
        self._max_header = limits.max_header_bytes
        self._header_timeout = limits.header_timeout_s
        self._body_timeout = limits.body_timeout_s
        self._min_rate = limits.min_body_rate_bytes_s
        self._in_headers = True  # the next bytes belong to a request line and its headers
        self._header_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._body_started = 0.0  # when the current body began (monotonic)
        self._body_last = 0.0  # when its last byte came
        self._body_bytes = 0
        self._in_body = False
        self._discarding = False  # refused: what still comes is read and dropped until the close

    # ---- uvicorn's Protocol interface -----------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self._header_timeout, self._header_expired)  # a silent connection is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._in_headers:
            if self._header_bytes == 0 and self._timer is None:
                self._arm(self._header_timeout, self._header_expired)
            end = data.find(_END)
            seen = self._header_bytes + (len(data) if end < 0 else end)
            if seen > self._max_header:
                self._refuse(431, f"request headers are over the limit of {self._max_header} bytes",
                             "headers_too_large")
                return
            self._header_bytes = seen
        elif self._in_body:
            self._body_last = time.monotonic()
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, "the request is not valid HTTP/1.1", "invalid_http")

    # ---- parser callbacks -----------------------------------------------------------------------
    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm()
        super().on_headers_complete()
        if self._expects_body():
            self._in_body = True
            self._body_started = self._body_last = time.monotonic()
            self._body_bytes = 0
            self._arm(self._body_timeout, self._body_check)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_headers = True
        self._header_bytes = 0
        if self._in_body:
            self._in_body = False
            self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self._in_body:  # answered without reading its whole body (e.g. a 413): stop watching it
            self._in_body = False
            self._disarm()
        super().on_response_complete()

    # ---- timers ---------------------------------------------------------------------------------
    def _arm(self, delay: float, callback: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_expired(self) -> None:
        self._timer = None
        if not self._in_headers or self.transport.is_closing():
            return
        if self._header_bytes == 0:  # nothing came: close quietly, as a keep-alive timeout would
            self.transport.close()
            return
        self._refuse(408, f"the request headers did not arrive within {self._header_timeout:g}s", "request_timeout")

    def _body_check(self) -> None:
        self._timer = None
        if not self._in_body or self.transport.is_closing():
            return
        now = time.monotonic()
        stalled = now - self._body_last >= self._body_timeout
        slow = self._body_bytes < self._min_rate * (now - self._body_started)
        if stalled or slow:
            self._refuse(408, "the request body stopped or came slower than "
                         f"{self._min_rate:g} bytes/s", "request_timeout")
            return
        self._arm(min(1.0, self._body_timeout), self._body_check)

    def _expects_body(self) -> bool:
        for name, value in self.headers:
            if name == b"content-length":
                return value.strip() not in (b"0", b"")
            if name == b"transfer-encoding":
                return True
        return False

    # ---- refusing -------------------------------------------------------------------------------
    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer ``status`` in the OpenAI error shape (unless a response has begun) and close."""
        self._disarm()
        self._in_body = False
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
