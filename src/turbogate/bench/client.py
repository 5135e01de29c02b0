"""One timed HTTP request against an OpenAI-compatible route (aiohttp, streaming by default).

Timing follows vLLM's benchmark (see turbogate.results.timing), with one guard: a streamed chunk
counts as a token chunk only when it carries generated text or a finish reason, because some
servers send an empty ``{"role": "assistant"}`` chunk before any token is computed.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from turbogate.results.timing import stream_timing, tpot

SERVED_TIER = {"priority": "turbo", "default": "standard", "flex": "relax", "auto": "standard"}
TIER_HEADER = "X-Turbogate-Tier"


def parse_server_timing(value: str | None) -> dict[str, float]:
    """``l1;dur=0.4, upstream;dur=12.1`` → {"l1": 0.4, "upstream": 12.1} (ms); bad parts are skipped."""
    out: dict[str, float] = {}
    if not value:
        return out
    for metric in value.split(","):
        fields = [f.strip() for f in metric.split(";")]
        name = fields[0]
        if not name:
            continue
        for f in fields[1:]:
            key, _, val = f.partition("=")
            if key.strip().lower() == "dur":
                with contextlib.suppress(ValueError):
                    out[name] = out.get(name, 0.0) + float(val.strip().strip('"'))
    return out


def normalize_tier(value: str | None) -> str | None:
    if not value:
        return None
    v = value.strip().lower()
    return SERVED_TIER.get(v, v)


@dataclass(slots=True)
class Outcome:
    """What one request produced; times are ``time.perf_counter()`` values."""

    sent: float
    end: float
    status: int | None = None
    ok: bool = False
    error: str | None = None
    ttft: float | None = None
    itl: tuple[float, ...] = ()
    tpot: float | None = None
    e2e: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tier_served: str | None = None
    server_timing: dict[str, float] = field(default_factory=dict)
    replica: str | None = None


def _has_output(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices")
    if not choices:
        return False
    c = choices[0]
    if c.get("finish_reason"):
        return True
    delta = c.get("delta")
    if isinstance(delta, dict):
        return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))
    return bool(c.get("text"))


def error_message(body: bytes) -> str:
    try:
        data = orjson.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
    except orjson.JSONDecodeError:
        pass
    return body[:300].decode(errors="replace")


async def send_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str],
                       stream: bool) -> Outcome:
    """Send ``body`` and time it; never raises for HTTP or connection errors (cancellation passes)."""
    payload = orjson.dumps(body)
    sent = time.perf_counter()
    out = Outcome(sent=sent, end=sent)
    try:
        async with session.post(url, data=payload, headers=headers) as resp:
            out.status = resp.status
            out.server_timing = parse_server_timing(resp.headers.get("Server-Timing"))
            out.tier_served = normalize_tier(resp.headers.get(TIER_HEADER))
            out.replica = resp.headers.get("X-Turbogate-Replica")
            if resp.status != 200:
                out.error = f"HTTP {resp.status}: {error_message(await resp.read())}"
                return out
            if stream:
                await _read_stream(resp, out)
            else:
                raw = await resp.read()
                finish_plain(raw, time.perf_counter(), out)
    except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError, ConnectionError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
    finally:
        out.end = time.perf_counter()
    return out


def _take_usage(data: dict[str, Any], out: Outcome) -> None:
    usage = data.get("usage")
    if isinstance(usage, dict):
        if usage.get("prompt_tokens") is not None:
            out.prompt_tokens = int(usage["prompt_tokens"])
        if usage.get("completion_tokens") is not None:
            out.output_tokens = int(usage["completion_tokens"])


class SSEReader:
    """Consumes a streamed body as it arrives (any split) and fills an :class:`Outcome`."""

    __slots__ = ("_buf", "chunks", "done", "out")

    def __init__(self, out: Outcome) -> None:
        self.out = out
        self.chunks: list[tuple[float, bool]] = []
        self.done = False
        self._buf = b""

    def feed(self, data: bytes, now: float) -> bool:
        """Take bytes received at ``now``; True once the stream is over ([DONE] or an error event)."""
        out = self.out
        buf = self._buf + data
        *lines, self._buf = buf.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                return True
            chunk = orjson.loads(payload)
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                err = chunk["error"]
                out.error = "stream error: " + str(err.get("message") if isinstance(err, dict) else err)[:300]
                self.chunks.append((now, False))
                self.done = True
                return True
            self.chunks.append((now, _has_output(chunk)))
            _take_usage(chunk, out)
            if out.tier_served is None and chunk.get("service_tier"):
                out.tier_served = normalize_tier(str(chunk["service_tier"]))
        return False

    def finish(self) -> None:
        out = self.out
        timing = stream_timing(out.sent, self.chunks)
        out.ttft, out.itl, out.e2e = timing.ttft_s, timing.itl_s, timing.e2e_s
        out.tpot = tpot(out.e2e, out.ttft, out.output_tokens)
        if out.error is None and not self.done:
            out.error = "stream ended without [DONE]"
        if out.error is None and out.ttft is None:
            out.error = "stream carried no output chunk"
        out.ok = out.error is None


def finish_plain(body: bytes, now: float, out: Outcome) -> None:
    """A non-streamed answer: TTFT = E2E (there is no earlier byte to time)."""
    data = orjson.loads(body)
    out.ttft = out.e2e = now - out.sent
    if isinstance(data, dict):
        _take_usage(data, out)
        if out.tier_served is None:
            out.tier_served = normalize_tier(data.get("service_tier"))
    out.ok = out.error is None


async def _read_stream(resp: aiohttp.ClientResponse, out: Outcome) -> None:
    reader = SSEReader(out)
    # Read whatever arrived and split it into SSE lines ourselves: far cheaper than readline().
    async for data in resp.content.iter_any():
        if reader.feed(data, time.perf_counter()):
            break
    reader.finish()
