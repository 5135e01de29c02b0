"""The gateway's request/response cycle on uvicorn's httptools protocol, with the per-request
Python of uvicorn's own cycle trimmed.  Same ASGI behaviour, cheaper:

- **One write per small answer.**  A response head waits in the cycle for the body that follows
  it (the gateway always sends both in the same turn of the event loop): head and body leave in
  one ``send()``, one TCP segment, and the client wakes once.  A head that no body follows in the
  same turn (a ``100 Continue``-style pause, a stream's headers before a slow first chunk) leaves
  at the end of that turn, so nothing waits longer than that.  The cycle holds the head, not a
  wrapper around the transport, so nothing is added to the transport's other calls.
- **One check of the headers**, not two regular-expression searches per header: the names
  joined, then the values joined by a tab (allowed in a value, so it cannot hide a bad byte),
  each mapped through a table of uvicorn's forbidden bytes (``bytes.translate``: one C pass).
- **A whole answer in one call** (``send_whole``): the proxy route's usual JSON answer, head and
  body built and written at once, without the two ASGI messages and their two coroutines
  (``Watch.send_whole`` uses it; any other ``send`` gets the messages).
- No access-log branch and no default headers (the gateway turns both off).
- **A whole body without a wait**: the usual request's body came with its headers, and the
  first ``receive()`` hands it over at once instead of waiting on the already-set event (or,
  through ``whole_body``, without any coroutine).

Everything else (a body still arriving, ``100 Continue``, disconnects, pipelining) is uvicorn's
``RequestResponseCycle``; the guarded protocol (gateway/guard.py) creates this class instead.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, STATUS_LINE, RequestResponseCycle


def _table(forbidden: re.Pattern[bytes]) -> bytes:
    """A ``bytes.translate`` table: 0 for each byte ``forbidden`` matches, 1 for the others."""
    return bytes(0 if forbidden.match(bytes([c])) else 1 for c in range(256))


_NAME_BYTES, _VALUE_BYTES = _table(HEADER_RE), _table(HEADER_VALUE_RE)  # uvicorn's own rules

_CRLF = b"\r\n"
_SEP = b": "
_CLOSE = b"connection: close\r\n"
_CHUNKED = b"transfer-encoding: chunked\r\n"
_LAST_CHUNK = b"0\r\n\r\n"


def _check(names: tuple[bytes, ...], values: tuple[bytes, ...]) -> None:
    """Refuse a response whose header names or values hold a byte uvicorn forbids there."""
    if 0 in b"".join(names).translate(_NAME_BYTES):
        raise RuntimeError("Invalid HTTP header name.")
    if 0 in b"\t".join(values).translate(_VALUE_BYTES):
        raise RuntimeError("Invalid HTTP header value.")


def _values_of(name: bytes, names: list[bytes], values: tuple[bytes, ...]) -> list[bytes]:
    """The values of every header called ``name`` (lower-case ``names``; a rare header's path)."""
    return [value for at, value in enumerate(values) if names[at] == name]


def _nothing() -> None:
    """A finished cycle's ``on_response`` (uvicorn sets a lambda)."""


class RequestEvent:
    """``asyncio.Event``'s job in one request cycle (the request's body came, or the response
    ended, or the client left), for less: the protocol's hot callbacks read ``value`` before
    calling ``set()``, and waiting is the rare path (a body still arriving, a queued request
    watching its client).  Its waiters are a list, never None, so a compiled build's type of the
    attribute holds across the ``await`` (a set() meanwhile swaps the list, never drops it)."""

    __slots__ = ("_waiters", "value")

    def __init__(self) -> None:
        self.value = False  #: set, not yet cleared
        self._waiters: list[asyncio.Future[None]] = []

    def is_set(self) -> bool:
        return self.value

    def set(self) -> None:
        if not self.value:
            self.value = True
            if self._waiters:
                waiters, self._waiters = self._waiters, []
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)

    def clear(self) -> None:
        self.value = False

    async def wait(self) -> bool:
        if self.value:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)
        return True


class LeanCycle(RequestResponseCycle):
    """uvicorn's request cycle with a leaner ``send`` (see the module docstring)."""

    message_event: RequestEvent  # type: ignore[assignment]
    body: bytearray  # declared here so a compiled build knows the attribute (set in __init__)
    # uvicorn's attributes, declared so a compiled build keeps them in the object's own fields.
    scope: Any
    transport: Any
    flow: Any
    logger: Any
    access_logger: Any
    on_response: Any
    keep_alive: bool
    waiting_for_100_continue: bool
    # Where every request starts, as class attributes: an instance stores only what it changes
    # (a dozen fewer stores a request).  None is a mutable object two cycles could share.
    access_log = False
    disconnected = False
    more_body = True
    response_started = False
    response_complete = False
    chunked_encoding: bool | None = None
    expected_content_length = 0
    _head: bytes | None = None  # the response head, until its body (or the turn's end)
    _body_read = False  # receive() has handed the app a whole body

    def __init__(self, scope: Any, transport: asyncio.Transport, flow: FlowControl, logger: Any,
                 message_event: RequestEvent, expect_100_continue: bool, keep_alive: bool,
                 on_response: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        # The attributes uvicorn's protocol and cycle read, set directly (its __init__ takes 11).
        self.scope = scope
        self.transport = transport
        self.flow = flow
        self.logger = self.access_logger = logger
        self.default_headers: list[tuple[bytes, bytes]] = []
        self.message_event = message_event
        self.on_response = on_response
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.body = bytearray()
        # The protocol's own loop, handed in: looking the running loop up per request is not free.
        self._loop = loop

    async def run_asgi(self, app: Any) -> None:
        """uvicorn's ASGI exception wrapper, here so a compiled build runs it as C (the coroutine
        every request's task runs)."""
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self.send_500_response()
            else:
                self.transport.close()
        else:
            if result is not None:
                self.logger.error("ASGI callable should return None, but returned '%s'.", result)
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                self.logger.error("ASGI callable returned without starting response.")
                await self.send_500_response()
            elif not self.response_complete and not self.disconnected:
                self.logger.error("ASGI callable returned without completing response.")
                self.transport.close()
        finally:
            self.on_response = _nothing

    def _flush_head(self) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if not self.transport.is_closing():
                self.transport.write(head)

    def _start(self, message: Any) -> None:
        if message["type"] != "http.response.start":
            raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{message['type']}'.")
        self.response_started = True
        self.waiting_for_100_continue = False
        status = message["status"]
        headers = message.get("headers", ())
        close = not self.keep_alive
        chunked = None
        if headers:
            # Whole-list passes in C (zip, join, translate, split, map), no Python loop per header.
            names, values = zip(*headers, strict=True)
            _check(names, values)
            lowered = b"\n".join(names).lower().split(b"\n")  # a valid name holds no newline
            if b"transfer-encoding" in lowered and b"chunked" in [
                    value.lower() for value in _values_of(b"transfer-encoding", lowered, values)]:
                self.expected_content_length = 0
                chunked = True
            elif b"content-length" in lowered:  # the first one counts, as in uvicorn
                self.expected_content_length = int(values[lowered.index(b"content-length")])
                chunked = False
            if b"connection" in lowered and any(
                    b"close" in [token.lower().strip() for token in value.split(b",")]
                    for value in _values_of(b"connection", lowered, values)):
                self.keep_alive = False
                close = False  # the app's own header says it
            head = [STATUS_LINE[status], _CRLF.join(map(_SEP.join, zip(lowered, values, strict=True))), _CRLF]
        else:
            head = [STATUS_LINE[status]]
        if close:
            head.append(_CLOSE)
        if chunked is None and self.scope["method"] != "HEAD" and status not in (204, 304):
            chunked = True
            head.append(_CHUNKED)
        self.chunked_encoding = chunked
        head.append(_CRLF)
        self._head = b"".join(head)
        (self._loop or asyncio.get_running_loop()).call_soon(self._flush_head)

    def _body(self, message: Any) -> None:
        if message["type"] != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{message['type']}'.")
        body: bytes = message.get("body", b"")
        more_body: bool = message.get("more_body", False)
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
            out = b""
        elif self.chunked_encoding:
            out = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more_body:
                out += _LAST_CHUNK
        else:
            if len(body) > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
            out = body
        head = self._head
        if head is not None:
            self._head = None
            out = head + out
        if out:
            self.transport.write(out)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self._complete()

    def _complete(self) -> None:
        """The response's last byte is written: wake whoever waits on the cycle, and let the
        protocol go on (the next request, or the close)."""
        self.response_complete = True
        if not self.message_event.value:  # (cleared by the body's receive(): a watcher may wait)
            self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()

    def send_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """A whole answer at once, in one write: what ``send`` does with a start message and one
        last body message, without the two messages, their two coroutines and the parse of
        headers the gateway made itself (the proxy route's usual JSON answer).  ``headers`` must
        not carry ``content-length``, ``transfer-encoding`` or ``connection``: this adds the
        first and the last.  False, having done nothing, where it cannot take this path (the
        response began, the client's socket is paused or gone, a HEAD): send the messages."""
        if self.response_started or self.disconnected or self.flow.write_paused or self.scope["method"] == "HEAD":
            return False
        if headers:  # the same checks as _start's, in C: one pass over the names, one over the values
            names, values = zip(*headers, strict=True)
            _check(names, values)
            lines = _CRLF.join(map(_SEP.join, zip(b"\n".join(names).lower().split(b"\n"), values, strict=True)))
            out = [STATUS_LINE[status], lines, _CRLF, b"content-length: %d\r\n" % len(body)]
        else:
            out = [STATUS_LINE[status], b"content-length: %d\r\n" % len(body)]
        self.response_started = True
        self.waiting_for_100_continue = False
        self.chunked_encoding = False
        if not self.keep_alive:
            out.append(_CLOSE)
        out += (_CRLF, body)
        self.transport.write(b"".join(out))
        self._complete()
        return True

    def take_whole_body(self) -> bytes | None:
        """The request's whole body if it came with its headers and nothing has read it yet (what
        the first ``receive()`` returns at once), else None; uvicorn's ``receive()`` would wait on
        the already-set event and then clear it."""
        if (self.more_body or self._body_read or self.disconnected or self.response_complete
                or self.waiting_for_100_continue):
            return None
        self._body_read = True
        self.message_event.value = False  # a later receive() waits for the disconnect, as uvicorn's does
        if self.flow.read_paused:  # a large body paused reading: resume it, as uvicorn's receive() does
            self.flow.resume_reading()
        body = bytes(self.body)
        self.body = bytearray()
        return body

    async def receive(self) -> Any:
        body = self.take_whole_body()
        if body is not None:
            return {"type": "http.request", "body": body, "more_body": False}
        return await super().receive()

    async def send(self, message: Any) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            self._start(message)
        elif not self.response_complete:
            self._body(message)
        else:
            raise RuntimeError(f"Unexpected ASGI message '{message['type']}' sent, after response already completed.")


def whole_body(receive: Any) -> bytes | None:
    """``LeanCycle.take_whole_body`` when ``receive`` is a lean cycle's (the usual request under
    ``turbogate serve``: no coroutine to read its body), else None: read it with ``receive()``."""
    cycle = getattr(receive, "__self__", None)
    return cycle.take_whole_body() if type(cycle) is LeanCycle else None
