"""Prompt token counting: a real tokenizer when one is given, else a documented estimate.

The estimate is OpenAI's rule of thumb for English, about four characters per token
(``ceil(len(text) / 4)``, at least 1 for non-empty text).  Prompt framing follows Llama 3:

* completions: 1 (BOS) + tokens(prompt); a list of token ids counts as its length;
* chat: 1 (BOS) + Σ over messages (5 framing tokens + tokens(content)) + 4 for the assistant
  header that the chat template appends — ``<|start_header_id|>role<|end_header_id|>\\n\\n …
  <|eot_id|>`` is five tokens around each message's content.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

BOS_TOKENS = 1
CHAT_MESSAGE_OVERHEAD = 5
CHAT_ASSISTANT_HEADER = 4


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class CharEstimator:
    """About four characters per token."""

    name = "chars/4 estimate"

    def count(self, text: str) -> int:
        return (len(text) + 3) // 4


class HFTokenizer:
    """A Hugging Face ``tokenizer.json`` loaded with the ``tokenizers`` package (no network)."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # optional extra
            raise RuntimeError(
                "--tokenizer needs the 'tokenizers' package: pip install 'turbogate[tokenizer]'"
            ) from exc
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise RuntimeError(f"--tokenizer: no tokenizer.json at {p}")
        self._tok = Tokenizer.from_file(str(p))
        self.name = f"tokenizer {p}"

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)


def make_counter(tokenizer: str | None) -> TokenCounter:
    return HFTokenizer(tokenizer) if tokenizer else CharEstimator()


def completion_prompt_tokens(counter: TokenCounter, prompt: str | list[int]) -> int:
    if isinstance(prompt, list):
        return len(prompt)
    return BOS_TOKENS + counter.count(prompt)


def chat_prompt_tokens(counter: TokenCounter, contents: list[str]) -> int:
    body = sum(CHAT_MESSAGE_OVERHEAD + counter.count(text) for text in contents)
    return BOS_TOKENS + body + CHAT_ASSISTANT_HEADER
