"""Small raw-ASGI helpers shared by the gateway and the emulator: OpenAI error bodies, whole
responses and request bodies, with no framework per request (chosen by measured overhead)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import orjson

from turbogate.errors import TurbogateError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON_CT = (b"content-type", b"application/json")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    410: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
    """The OpenAI error shape, so SDK clients raise the matching exception class."""
    return orjson.dumps(
        {"error": {"message": message, "type": _ERROR_TYPES.get(status, "api_error"), "param": param, "code": code}}
    )


async def send_bytes(send: Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = (),
                     content_type: bytes = JSON_CT[1]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, obj: Any, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    await send_bytes(send, status, orjson.dumps(obj), headers)


async def send_error(
    send: Send,
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    await send_bytes(send, status, error_body(status, message, param=param, code=code), headers)


class BodyTooLarge(TurbogateError):
    """A request body over the size limit (the caller answers 413)."""


async def read_body(receive: Receive, limit: int | None = None) -> bytes | None:
    """The whole request body, ``None`` if the client went away, ``BodyTooLarge`` over ``limit``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if limit is not None and size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


class AsgiApp(ABC):
    """The ASGI entry both servers share: HTTP goes to ``handle_http``, the lifespan protocol to
    ``startup`` / ``shutdown`` (a failing startup is reported to the server, not raised)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.handle_http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await self.handle_websocket(scope, receive, send)

    async def handle_websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a WebSocket (the handshake gets 403) unless a subclass serves it."""
        await receive()
        await send({"type": "websocket.close", "code": 1008})

    @abstractmethod
    async def handle_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request."""

    @abstractmethod
    async def startup(self) -> None:
        """Start background work (called once, before the first request)."""

    @abstractmethod
    async def shutdown(self) -> None:
        """Stop background work."""

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:  # report, do not crash the server loop with a traceback
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return
