"""OpenAI request validation and vLLM-shaped response bodies (no I/O).

Validation raises :class:`turbogate.errors.InvalidRequest` naming the field, which the
server turns into a 400 OpenAI error body.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from turbogate.emulator.tokens import TokenCounter, chat_prompt_tokens, completion_prompt_tokens
from turbogate.errors import InvalidRequest


@dataclass(slots=True)
class GenRequest:
    """What a completion request asks for, after validation."""

    model: str
    prompt_tokens: int
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    priority: int
    seed: int | None


def error_body(message: str, type_: str, param: str | None, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _int(body: dict[str, Any], key: str, minimum: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"'{key}' must be an integer, got {type(value).__name__}", key)
    if minimum is not None and value < minimum:
        raise InvalidRequest(f"'{key}' must be at least {minimum}, got {value}", key)
    return value


def _bool(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{key}' must be a boolean, got {type(value).__name__}", key)
    return value


def _number(body: dict[str, Any], key: str, lo: float, hi: float) -> None:
    value = body.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"'{key}' must be a number, got {type(value).__name__}", key)
    if not lo <= value <= hi:
        raise InvalidRequest(f"'{key}' must be between {lo} and {hi}, got {value}", key)


def _common(body: dict[str, Any], prompt_tokens: int) -> GenRequest:
    model = body.get("model")
    if model is None:
        raise InvalidRequest("'model' is required", "model")
    if not isinstance(model, str):
        raise InvalidRequest(f"'model' must be a string, got {type(model).__name__}", "model")
    max_tokens = _int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    elif body.get("max_tokens") is not None:
        _int(body, "max_tokens", 1)
    min_tokens = _int(body, "min_tokens", 0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise InvalidRequest(f"'min_tokens' ({min_tokens}) must be <= max_tokens ({max_tokens})", "min_tokens")
    n = _int(body, "n", 1)
    if n is not None and n != 1:
        raise InvalidRequest("'n' must be 1: the emulator returns one choice per request", "n")
    stream = _bool(body, "stream")
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise InvalidRequest("'stream_options' can only be set when 'stream' is true", "stream_options")
        if not isinstance(options, dict):
            raise InvalidRequest("'stream_options' must be an object", "stream_options")
        include_usage = _bool(options, "include_usage")
    _number(body, "temperature", 0.0, 2.0)
    _number(body, "top_p", 0.0, 1.0)
    _number(body, "presence_penalty", -2.0, 2.0)
    _number(body, "frequency_penalty", -2.0, 2.0)
    return GenRequest(
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_bool(body, "ignore_eos"),
        stream=stream,
        include_usage=include_usage,
        priority=_int(body, "priority") or 0,
        seed=_int(body, "seed"),
    )


def _message_text(message: Any, index: int) -> str:
    field = f"messages[{index}]"
    if not isinstance(message, dict):
        raise InvalidRequest(f"'{field}' must be an object", field)
    role = message.get("role")
    if not isinstance(role, str):
        raise InvalidRequest(f"'{field}.role' is required and must be a string", f"{field}.role")
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise InvalidRequest(f"'{field}.content[{j}]' must be an object with a 'type'", f"{field}.content")
            text = part.get("text")
            if isinstance(text, str):
                parts.append(text)
        return "".join(parts)
    raise InvalidRequest(f"'{field}.content' must be a string or a list of parts", f"{field}.content")


def parse_chat(body: Any, counter: TokenCounter) -> GenRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object", None)
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("'messages' is required", "messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list", "messages")
    texts = [_message_text(m, i) for i, m in enumerate(messages)]
    return _common(body, chat_prompt_tokens(counter, texts))


def parse_completion(body: Any, counter: TokenCounter) -> GenRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object", None)
    prompt = body.get("prompt")
    if prompt is None:
        raise InvalidRequest("'prompt' is required", "prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    token_ids = isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt)
    if isinstance(prompt, str) or token_ids:
        tokens = completion_prompt_tokens(counter, prompt)
    else:
        raise InvalidRequest(
            "'prompt' must be a string, a list of token ids, or a list holding one of those "
            "(the emulator serves one prompt per request)",
            "prompt",
        )
    return _common(body, tokens)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def chat_response(rid: str, model: str, text: str, finish: str, prompt_tokens: int, n: int) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        ],
        "usage": usage(prompt_tokens, n),
    }


def completion_response(rid: str, model: str, text: str, finish: str, prompt_tokens: int, n: int) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}],
        "usage": usage(prompt_tokens, n),
    }


def chat_chunk(rid: str, created: int, model: str, delta: dict[str, str], finish: str | None) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                     **({"stop_reason": None} if finish else {})}],
    }


def completion_chunk(rid: str, created: int, model: str, text: str, finish: str | None) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}],
    }


def usage_chunk(rid: str, created: int, model: str, obj: str, prompt_tokens: int, n: int) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [],
            "usage": usage(prompt_tokens, n)}
