"""Read the engine's token counts from its answer without parsing the whole body: the flat
``"usage":{...}`` object of a JSON answer, or of a stream's usage chunk (the gateway asks for
one with ``stream_options.include_usage`` and drops it again when the client did not ask)."""

from __future__ import annotations

import orjson

from turbogate.sched import FlowRequest

_USAGE = b'"usage":'


def _counts(data: bytes) -> tuple[int, int] | None:
    at = data.rfind(_USAGE)
    if at < 0:
        return None
    start = at + len(_USAGE)
    while data[start:start + 1] == b" ":
        start += 1
    end = data.find(b"}", start)  # the usage object is flat (its details, if any, are the only nesting)
    if data[start:start + 1] != b"{" or end < 0:  # "usage":null, or cut short
        return None
    try:
        obj = orjson.loads(data[start:end + 1])
    except orjson.JSONDecodeError:
        try:  # nested details ({"prompt_tokens_details": {...}}): parse from the object start
            obj = orjson.loads(data[start:data.find(b"}}", start) + 2])
        except (orjson.JSONDecodeError, ValueError):
            return None
    if not isinstance(obj, dict):
        return None
    p, c = obj.get("prompt_tokens", 0), obj.get("completion_tokens", 0)
    return (p if isinstance(p, int) else 0, c if isinstance(c, int) else 0)


def take_json_usage(req: FlowRequest, data: bytes) -> None:
    """Set ``req``'s token counts from a JSON answer."""
    counts = _counts(data)
    if counts is not None:
        req.prompt_tokens, req.completion_tokens = counts


def hold_done(events: bytes) -> tuple[bytes, bytes]:
    """Split complete SSE ``events`` before ``data: [DONE]``: a client stops reading there, so
    that event is the answer's real last byte and waits until the usage record is stored."""
    at = events.find(b"data: [DONE]")
    if at < 0 or (at > 0 and events[at - 1:at] != b"\n"):
        return events, b""
    return events[:at], events[at:]


def take_stream_usage(req: FlowRequest, events: bytes, strip: bool) -> bytes:
    """Set ``req``'s token counts from complete SSE ``events`` holding a usage chunk; returns the
    events, without that chunk when ``strip`` (the client did not ask for it)."""
    if b'"usage":{' not in events and b'"usage": {' not in events:
        return events
    kept = []
    for part in events.split(b"\n\n"):
        counts = _counts(part) if _USAGE in part else None
        if counts is not None:
            req.prompt_tokens, req.completion_tokens = counts
            if strip and b'"choices":[]' in part:  # the usage-only chunk the client did not ask for
                continue
        kept.append(part)
    return b"\n\n".join(kept)
