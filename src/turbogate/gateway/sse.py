"""Rewrite SSE chunks on the fly so each event names the tier served, without parsing JSON.

Events are forwarded as soon as they are complete (``\\n\\n``), so streaming stays chunk by
chunk.  The tier is inserted right after ``data: {`` at the start of a line: JSON text cannot
contain a raw newline, so that pattern never matches inside a payload.  An event that already
carries ``service_tier`` takes the slow path (parse, set, dump).
"""

from __future__ import annotations

import orjson

_MAX_PENDING = 1 << 16


class SSERewriter:
    __slots__ = ("_buf", "_insert", "_tier")

    def __init__(self, tier: str) -> None:
        self._tier = tier
        self._insert = b'\ndata: {"service_tier":"' + tier.encode() + b'",'
        self._buf = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._buf + chunk if self._buf else chunk
        cut = data.rfind(b"\n\n")
        if cut < 0:
            if len(data) > _MAX_PENDING:  # not SSE as we know it: pass it through untouched
                self._buf = b""
                return data
            self._buf = data
            return b""
        self._buf = data[cut + 2 :]
        return self._rewrite(data[: cut + 2])

    def flush(self) -> bytes:
        rest, self._buf = self._buf, b""
        return self._rewrite(rest) if rest else b""

    def _rewrite(self, events: bytes) -> bytes:
        if events.find(b'"service_tier"') >= 0:  # find, not `in`: `in` on bytes first tries the operand as an int
            parts = events.split(b"\n\n")
            tail = parts.pop()  # empty when events end on a boundary
            return b"".join(self._slow(p) for p in parts) + tail
        return (b"\n" + events).replace(b"\ndata: {", self._insert)[1:]

    def _slow(self, event: bytes) -> bytes:
        lines = event.split(b"\n")
        for i, line in enumerate(lines):
            if line.startswith(b"data: {"):
                try:
                    obj = orjson.loads(line[6:])
                except orjson.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    obj["service_tier"] = self._tier
                    lines[i] = b"data: " + orjson.dumps(obj)
        return b"\n".join(lines) + b"\n\n"


def tag_json_body(body: bytes, tier: str) -> bytes:
    """Add ``service_tier`` to a JSON object body (cheaply when it is not there yet)."""
    if body[:1] == b"{" and body.find(b'"service_tier"') < 0 and body[1:].lstrip()[:1] not in (b"}", b""):
        return b'{"service_tier":"' + tier.encode() + b'",' + body[1:]
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if isinstance(obj, dict):
        obj["service_tier"] = tier
        return orjson.dumps(obj)
    return body
