"""Prompts from a file: JSONL (``prompt`` / ``text`` / chat ``messages``) or ShareGPT JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


def _from_obj(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    for key in ("prompt", "text", "input"):
        if isinstance(obj.get(key), str):
            return str(obj[key])
    msgs = obj.get("messages")
    if isinstance(msgs, list):
        users = [m.get("content") for m in msgs if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[0], str):
            return str(users[0])
    conv = obj.get("conversations") or obj.get("conversation")
    if isinstance(conv, list):  # ShareGPT: the first human turn is the prompt
        for turn in conv:
            if isinstance(turn, dict) and turn.get("from") in ("human", "user") and isinstance(turn.get("value"), str):
                return str(turn["value"])
    return None


def load_prompts(path: Path) -> list[str]:
    """All usable prompts of ``path``; a clear error when there are none."""
    if not path.is_file():
        raise ValueError(f"--dataset: {path} does not exist")
    raw = path.read_bytes()
    prompts: list[str] = []
    stripped = raw.lstrip()
    if stripped.startswith(b"["):  # one JSON array (ShareGPT dumps)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"--dataset: {path} is not valid JSON ({exc})") from None
        prompts = [p for p in (_from_obj(o) for o in data) if p]
    else:
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                p = _from_obj(orjson.loads(line))
            except orjson.JSONDecodeError:
                raise ValueError(f"--dataset: {path}:{n} is not a JSON line") from None
            if p:
                prompts.append(p)
    if not prompts:
        raise ValueError(f"--dataset: no prompts found in {path} (expected JSONL with 'prompt'/'text'/'messages' "
                         "or ShareGPT 'conversations')")
    return prompts
