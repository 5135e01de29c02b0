"""HTTP conformance shared by every route: a 405 that says which methods the route takes
(``Allow``, RFC 9110 §15.5.6), and an engine's error answer rewritten into the gateway's own
error schema (``{"error": {"message": str, "type": str, "param": str|null, "code": str|null}}``),
so an SDK client parses every error the same way whichever engine sent it."""

from __future__ import annotations

from typing import Any

import orjson

from turbogate.asgi import Send, error_body, send_error

_MESSAGE_CAP = 2000  # an engine's error text kept in the answer (a traceback is not an API)


async def method_not_allowed(send: Send, path: str, *allowed: str) -> None:
    """405 naming the methods ``path`` takes, in the body and in ``Allow``."""
    methods = ", ".join(allowed)
    await send_error(send, 405, f"{path} takes {methods}", code="method_not_allowed",
                     headers=[(b"allow", methods.encode())])


def _text(value: Any) -> str | None:
    """A string field of the schema: strings as they are, numbers as digits, nothing as None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()[:_MESSAGE_CAP]


def engine_error(status: int, data: bytes) -> bytes:
    """An engine's non-200 body in the gateway's error schema.

    Engines answer errors in several shapes: OpenAI's ``{"error": {...}}`` (sometimes with an
    integer ``code``), vLLM's flat ``{"object": "error", "message", "type", "code": 400}``,
    FastAPI's ``{"detail": ...}``, or plain text.  The message and, where they exist, the
    engine's type, param and code are kept; anything else becomes the message."""
    try:
        parsed = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        parsed = None
    fields: dict[str, Any] = {}
    if isinstance(parsed, dict):
        inner = parsed.get("error")
        if isinstance(inner, dict):
            fields = inner
        elif isinstance(inner, str):
            fields = {"message": inner, "type": parsed.get("type"), "code": parsed.get("code")}
        elif "message" in parsed:
            fields = parsed
        elif "detail" in parsed:
            fields = {"message": parsed["detail"]}
    message = _text(fields.get("message")) if fields else None
    if not message:
        raw = data.decode("utf-8", "replace").strip()[:_MESSAGE_CAP]
        message = f"the engine answered HTTP {status}" + (f": {raw}" if raw else "")
    body: dict[str, Any] = orjson.loads(error_body(status, message[:_MESSAGE_CAP], param=_text(fields.get("param")),
                                                   code=_text(fields.get("code"))))
    engine_type = _text(fields.get("type"))
    if engine_type:
        body["error"]["type"] = engine_type
    return orjson.dumps(body)
