"""Values the engine takes and returns.  Tuples where one is made per request per step (speed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

Policy = Literal["fcfs", "priority"]
FinishReason = Literal["length", "stop"]


@dataclass(frozen=True, slots=True)
class Request:
    """One generation request as the engine sees it: token counts, not text.

    output_tokens: how many tokens it will produce (the shell decides: ``max_tokens`` when the
        model is not allowed to stop, else a seeded draw where "EOS" would fall).
    finish_reason: what to report when those tokens are done ("length" or "stop").
    priority: lower is served first under the priority policy (vLLM semantics).
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    finish_reason: FinishReason = "length"

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1:
            raise ValueError("prompt_tokens must be >= 1")
        if self.output_tokens < 1:
            raise ValueError("output_tokens must be >= 1")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Scheduler limits, named as vLLM names them."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    policy: Policy = "fcfs"
    block_size: int = 16
    num_gpu_blocks: int | None = None  # None = what the deployment's memory allows

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if self.max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be >= 1")
        if self.policy not in ("fcfs", "priority"):
            raise ValueError(f"policy must be 'fcfs' or 'priority', got {self.policy!r}")
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < 1:
            raise ValueError("num_gpu_blocks must be >= 1")


class TokenEvent(NamedTuple):
    """A request made progress in a step: it produced ``new_tokens`` output tokens.

    first_token marks the step that produced its first output token; finish_reason is set on
    the step that finished it (the request is gone from the engine afterwards).
    """

    request_id: str
    new_tokens: int
    output_tokens: int
    first_token: bool
    finish_reason: FinishReason | None


class StepResult(NamedTuple):
    """What one engine step did.  Its events take effect ``duration`` seconds after it starts."""

    duration: float
    events: list[TokenEvent]
    preempted: list[str]  # sent back to the waiting queue, KV freed (recompute later)
    scheduled_first: list[str]  # left the waiting queue for the first time (queue time ends)
    prefill_tokens: int
    decode_seqs: int


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Gauges and counters, as vLLM exports them."""

    running: int
    waiting: int
    kv_usage: float  # fraction of KV blocks in use, 0..1
    kv_blocks_total: int
    kv_blocks_used: int
    fragmentation: float  # 1 − largest free run / free blocks
    num_preemptions: int
    prompt_tokens: int  # prompt tokens prefilled (each request counted once)
    generation_tokens: int
    finished: int
    steps: int
    busy_time: float  # sum of step durations (virtual seconds)
