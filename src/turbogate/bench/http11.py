"""The bench's lean client: one timed request on the shared keep-alive client (turbogate.httpclient).

Why not aiohttp: a load generator's own cost per request bounds the rate it can send on time, and
aiohttp's client (a stream reader per response, a coroutine per read) costs several times the CPU
per request.  The shared client parses with httptools and stamps each body chunk with the time its
bytes arrived, so TTFT and inter-token gaps do not include how late this coroutine woke up.
``https://`` targets use aiohttp (see runner).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from turbogate.bench.client import (
    TIER_HEADER,
    Outcome,
    SSEReader,
    error_message,
    finish_plain,
    normalize_tier,
    parse_server_timing,
)
from turbogate.httpclient import UpstreamError, UpstreamPool, format_headers

_TIER = TIER_HEADER.lower()
_KEEP = ("server-timing", _TIER, "x-turbogate-replica")


class Http11Pool:
    """Keep-alive connections to one ``http://host:port``, grown on demand, never capped."""

    def __init__(self, base_url: str, connect_timeout: float = 10.0) -> None:
        self._pool = UpstreamPool(base_url, connect_timeout_s=connect_timeout, keep_headers=_KEEP)

    async def post(self, path: str, payload: bytes, headers: Mapping[str, str], stream: bool,
                   timeout: float) -> Outcome:
        """POST ``payload`` and time the answer; never raises for network errors (cancellation passes)."""
        content_type = b"application/json"
        extra: dict[str, str] = {}
        for k, v in headers.items():
            if k.lower() == "content-type":
                content_type = v.encode("latin-1")
            else:
                extra[k] = v
        sent = time.perf_counter()
        out = Outcome(sent=sent, end=sent)
        resp = None
        try:
            resp = await self._pool.request(b"POST", path, payload, content_type, format_headers(extra), timeout)
            out.status = status = resp.status
            h = resp.headers
            out.server_timing = parse_server_timing(h.get("server-timing"))
            out.tier_served = normalize_tier(h.get(_TIER))
            out.replica = h.get("x-turbogate-replica")
            if stream and status == 200:
                reader = SSEReader(out)
                while chunk := await resp.next_chunk():
                    reader.feed(chunk, resp.chunk_at)
                out.end = resp.completed_at
                reader.finish()
            else:
                body = await resp.read()
                out.end = resp.completed_at
                if status != 200:
                    out.error = f"HTTP {status}: {error_message(body)}"
                else:
                    finish_plain(body, out.end, out)
        except OSError as exc:  # UpstreamError, or anything else the socket raised
            out.end = time.perf_counter()
            out.error = _describe(exc)
            out.ok = False
        except ValueError as exc:  # bad JSON (orjson.JSONDecodeError is a ValueError)
            if out.end == sent:  # not complete yet: the stream broke off here
                out.end = time.perf_counter()
            out.error = f"{type(exc).__name__}: {exc}"[:300]
            out.ok = False
        except asyncio.CancelledError:
            if resp is not None:
                resp.abort()
            raise
        finally:
            if resp is not None:
                resp.release()  # back to the pool if the answer was complete, else the connection is dropped
        return out

    def close(self) -> None:
        self._pool.close()


def _describe(exc: OSError) -> str:
    """``TimeoutError: no complete answer within …`` and ``connection lost: …`` as before the shared
    client; a failed connect reads ``UpstreamError: cannot connect to host:port: …``."""
    if isinstance(exc, UpstreamError) and exc.timed_out:
        return f"TimeoutError: {exc}"[:300]
    if isinstance(exc, UpstreamError) and not exc.connect_failed:
        return f"connection lost: {exc}"[:300]
    return f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
