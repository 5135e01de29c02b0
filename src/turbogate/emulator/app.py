"""The emulator's HTTP surface: a raw ASGI app (no framework: this path must be cheap).

Endpoints as vLLM serves them: ``POST /v1/chat/completions``, ``POST /v1/completions``
(JSON or SSE), ``GET /v1/models``, ``GET /health``, ``GET /metrics``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from turbogate.asgi import AsgiApp, Receive, Scope, Send, read_body, send_bytes
from turbogate.emulator import protocol
from turbogate.emulator.metrics import EmulatorMetrics
from turbogate.emulator.runner import Aborted, EngineRunner, Handle
from turbogate.emulator.text import TextSource
from turbogate.emulator.tokens import TokenCounter
from turbogate.engine import (
    Engine,
    Request,
    RequestTooLarge,
    default_max_tokens,
    finish_reason,
    output_length,
)
from turbogate.errors import InvalidRequest, TurbogateError

log = logging.getLogger("turbogate.emulator")

_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


@dataclass
class Faults:
    error_rate: float = 0.0
    hang_rate: float = 0.0
    crash_after: int | None = None
    startup_delay: float = 0.0
    crash_mid_stream: bool = False  # exit once the first stream has sent its first token
    metrics_delay: float = 0.0  # /metrics answers this late


@dataclass
class EmulatorSettings:
    served_model_names: list[str]
    max_model_len: int
    seed: int = 0
    faults: Faults = field(default_factory=Faults)


class _HttpError(TurbogateError):
    def __init__(self, status: int, message: str, type_: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.param = param


class EmulatorApp(AsgiApp):
    def __init__(self, engine: Engine, counter: TokenCounter, settings: EmulatorSettings,
                 time_scale: float) -> None:
        self.engine = engine
        self.counter = counter
        self.settings = settings
        self.model_name = settings.served_model_names[0]
        self.metrics = EmulatorMetrics(engine, self.model_name)
        self.time_scale = time_scale
        self.runner: EngineRunner | None = None
        self._ids = itertools.count()
        self._answered = 0
        self._fault_rng = random.Random(settings.seed ^ 0x5EED)
        self._ready_at = 0.0
        self._id_prefix = uuid.uuid4().hex[:8]

    # ---- ASGI (AsgiApp) ------------------------------------------------------------------------

    async def startup(self) -> None:
        self.runner = EngineRunner(self.engine, self.metrics, self.time_scale)
        # DCGM's gauges average over a second of the wall clock: that many model seconds.
        self.metrics.use_model_clock(self.runner.model_now, 1.0 / self.time_scale if self.time_scale > 0 else 1.0)
        self.runner.start()
        self._ready_at = time.monotonic() + self.settings.faults.startup_delay

    async def shutdown(self) -> None:
        if self.runner is not None:
            await self.runner.stop()

    async def handle_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        method = scope["method"]
        try:
            if path in ("/v1/chat/completions", "/v1/completions"):
                if method != "POST":
                    raise _HttpError(405, f"{method} not allowed on {path}", "MethodNotAllowed")
                self.metrics.requests[path].inc()
                self._check_ready()
                await self._completion(path == "/v1/chat/completions", receive, send)
            elif method != "GET":
                raise _HttpError(405 if path in ("/health", "/metrics", "/v1/models") else 404,
                                 f"{method} {path} not found", "NotFoundError")
            elif path == "/health":
                if self.runner is not None and self.runner.failure is not None:
                    raise _HttpError(500, f"engine loop failed: {self.runner.failure!r}", "InternalServerError")
                ready = time.monotonic() >= self._ready_at
                await send_bytes(send, 200 if ready else 503, b"" if ready else b'{"status":"starting"}')
            elif path == "/metrics":
                if self.settings.faults.metrics_delay:
                    await asyncio.sleep(self.settings.faults.metrics_delay)
                await send_bytes(send, 200, generate_latest(self.metrics.registry),
                                 content_type=CONTENT_TYPE_LATEST.encode())
            elif path == "/v1/models":
                self._check_ready()
                await send_bytes(send, 200, orjson.dumps(self._models()))
            else:
                raise _HttpError(404, f"{path} not found", "NotFoundError")
        except _HttpError as exc:
            await send_bytes(send, exc.status, orjson.dumps(protocol.error_body(str(exc), exc.type, exc.param,
                                                                            exc.status)))

    def _check_ready(self) -> None:
        if time.monotonic() < self._ready_at:
            raise _HttpError(503, "the engine is starting up", "ServiceUnavailableError")

    def _models(self) -> dict[str, Any]:
        created = int(time.time())
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": name, "parent": None,
             "max_model_len": self.settings.max_model_len, "permission": []}
            for name in self.settings.served_model_names]}

    # ---- completions ---------------------------------------------------------------------------

    def _parse(self, chat: bool, raw: bytes) -> protocol.GenRequest:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _HttpError(400, f"request body is not valid JSON: {exc}", "BadRequestError", "body") from None
        try:
            gen = protocol.parse_chat(body, self.counter) if chat else protocol.parse_completion(body, self.counter)
        except InvalidRequest as exc:
            raise _HttpError(400, str(exc), "BadRequestError", exc.param) from None
        if gen.model not in self.settings.served_model_names:
            raise _HttpError(404, f"The model `{gen.model}` does not exist.", "NotFoundError", "model")
        if gen.priority != 0 and self.engine.config.policy != "priority":
            raise _HttpError(400, "'priority' needs --scheduling-policy priority (as in vLLM)", "BadRequestError",
                             "priority")
        limit = self.settings.max_model_len
        where = "messages" if chat else "prompt"
        wanted = gen.prompt_tokens + (gen.max_tokens or 0)
        if gen.prompt_tokens >= limit or wanted > limit:
            raise _HttpError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested {wanted} tokens "
                f"({gen.prompt_tokens} in the {where}, {gen.max_tokens or 0} in max_tokens for the completion). "
                f"Please reduce the length of the {where} or max_tokens.",
                "BadRequestError", "max_tokens" if gen.max_tokens and gen.prompt_tokens < limit else where)
        return gen

    async def _completion(self, chat: bool, receive: Receive, send: Send) -> None:
        raw = await read_body(receive)
        if raw is None:
            return  # the client left while sending the body
        gen = self._parse(chat, raw)
        faults = self.settings.faults
        if faults.error_rate > 0 and self._fault_rng.random() < faults.error_rate:
            self._count_answer()
            raise _HttpError(500, "injected fault (--error-rate)", "InternalServerError")
        if faults.hang_rate > 0 and self._fault_rng.random() < faults.hang_rate:
            while (await receive())["type"] != "http.disconnect":
                pass  # never answer; wait for the client to give up
            return
        seq = next(self._ids)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{self._id_prefix}{seq:x}"
        seed = gen.seed if gen.seed is not None else self.settings.seed * 1_000_003 + seq
        text = TextSource(seed)
        capped = gen.max_tokens is not None
        max_tokens = gen.max_tokens if gen.max_tokens is not None else \
            default_max_tokens(self.settings.max_model_len, gen.prompt_tokens)
        n_out = output_length(seed, max_tokens, min_tokens=gen.min_tokens, ignore_eos=gen.ignore_eos, capped=capped)
        finish = finish_reason(n_out, max_tokens)
        runner = self.runner
        assert runner is not None
        try:
            handle = runner.submit(Request(rid, gen.prompt_tokens, n_out, gen.priority, finish), gen.stream)
        except RequestTooLarge as exc:
            raise _HttpError(400, str(exc), "BadRequestError", "max_tokens") from None
        except RuntimeError as exc:
            raise _HttpError(500, str(exc), "InternalServerError") from None
        watcher = asyncio.ensure_future(receive())
        watcher.add_done_callback(lambda _t: runner.abort(rid))
        try:
            if gen.stream:
                await self._stream(chat, rid, gen, handle, text, send)
            else:
                try:
                    done = await handle.done
                except Aborted:
                    return
                words = "".join(text.words(done.output_tokens))
                build = protocol.chat_response if chat else protocol.completion_response
                body = build(rid, gen.model, words, done.finish_reason, gen.prompt_tokens, done.output_tokens)
                await send_bytes(send, 200, orjson.dumps(body))
            self._count_answer()
        finally:
            watcher.cancel()

    async def _stream(self, chat: bool, rid: str, gen: protocol.GenRequest, handle: Handle, text: TextSource,
                      send: Send) -> None:
        assert handle.queue is not None
        created = int(time.time())
        model = gen.model
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        # Like vLLM, the chat role chunk goes out with the first token, not before prefill ends.
        role = _sse(protocol.chat_chunk(rid, created, model, {"role": "assistant", "content": ""}, None)) \
            if chat else b""
        produced = 0
        while True:
            item = await handle.queue.get()
            if item is None:
                return  # aborted: the client is gone
            total, finish = item
            piece = "".join(text.words(total - produced))
            produced = total
            chunk = (protocol.chat_chunk(rid, created, model, {"content": piece}, finish) if chat
                     else protocol.completion_chunk(rid, created, model, piece, finish))
            await send({"type": "http.response.body", "body": role + _sse(chunk), "more_body": True})
            role = b""
            if self.settings.faults.crash_mid_stream:
                log.error("--crash-mid-stream: exiting mid-answer")
                asyncio.get_running_loop().call_later(0.05, os._exit, 3)  # let the first token go out
                await asyncio.sleep(3600)
            if finish is not None:
                break
        tail = b""
        if gen.include_usage:
            obj = "chat.completion.chunk" if chat else "text_completion"
            tail = _sse(protocol.usage_chunk(rid, created, model, obj, gen.prompt_tokens, produced))
        await send({"type": "http.response.body", "body": tail + b"data: [DONE]\n\n", "more_body": False})

    def _count_answer(self) -> None:
        limit = self.settings.faults.crash_after
        if limit is None:
            return
        self._answered += 1
        if self._answered == limit:
            log.error("--crash-after %d reached: exiting now", limit)
            # Let the transport flush the last response, then die as a crashed replica would.
            asyncio.get_running_loop().call_later(0.05, os._exit, 3)


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"
