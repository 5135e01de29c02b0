"""Values the engine takes and returns."""

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
    """Scheduler limits, named as vLLM names them.

    chunked_prefill: False schedules as vLLM V0 without chunked prefill does: a step that admits
        waiting requests prefills them alone (prefill first, the running decodes wait a step).
    num_scheduler_steps: vLLM V0's multi-step scheduling (``--num-scheduler-steps k``): a step of
        decodes only starts a run of k such steps, planned at once, in which nothing is admitted;
        a step with prefill in it is a single step.  1 = plan every step (vLLM V1, SGLang).
    output_lag_steps: steps a request's first token waits after the step that sampled it before the
        client sees it (vLLM V0's asynchronous output processor handles step i's outputs while step
        i + 1 runs: 1); the engine reports it in ``StepResult.first_token`` that much later.
    reserve_outputs: SGLang's admission (:mod:`turbogate.engine.reserve`): a waiting request is admitted
        only if it and every running request can produce their remaining output in the KV cache; with
        ``chunked_prefill`` False this is SGLang's prefill-first scheduling of batched prefills.
    reserve_whole: with ``reserve_outputs``, TensorRT-LLM's count (``GUARANTEED_NO_EVICT``): every running
        request and the candidate at their final lengths at once, not SGLang's walk by finish order.
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    policy: Policy = "fcfs"
    block_size: int = 16
    num_gpu_blocks: int | None = None  # None = what the deployment's memory allows
    chunked_prefill: bool = True
    num_scheduler_steps: int = 1
    output_lag_steps: int = 0
    reserve_outputs: bool = False
    reserve_whole: bool = False

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if self.max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be >= 1")
        if self.policy not in ("fcfs", "priority"):
            raise ValueError(f"policy must be 'fcfs' or 'priority', got {self.policy!r}")
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < 1:
            raise ValueError("num_gpu_blocks must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM refuses this too; it also lets every running sequence decode in every step.
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be greater than or equal "
                             f"to max_num_seqs ({self.max_num_seqs})")
        if self.block_size < 1:
            raise ValueError("block_size must be >= 1")
        if self.num_scheduler_steps < 1:
            raise ValueError("num_scheduler_steps must be >= 1")
        if self.output_lag_steps < 0:
            raise ValueError("output_lag_steps must be >= 0")


class Finished(NamedTuple):
    """A request that produced its last token in a step (it is gone from the engine afterwards)."""

    request_id: str
    output_tokens: int
    finish_reason: FinishReason


class StepResult(NamedTuple):
    """What one engine step did: only what changed, never one entry per running request.

    Its effects take place at ``start + duration``.  Streaming callers read a running request's
    progress with ``Engine.output_tokens(request_id)``.
    """

    start: float
    duration: float
    first_token: list[str]  # their first output token reaches the client at this step's end (after the output lag)
    finished: list[Finished]
    preempted: list[str]  # sent back to the waiting queue, KV freed (recompute later)
    scheduled_first: list[str]  # left the waiting queue for the first time (queue time ends at ``start``)
    prefill_tokens: int
    decode_seqs: int
    new_tokens: int  # output tokens sampled in this step (decodes plus prefills that completed)

    @property
    def end(self) -> float:
        return self.start + self.duration


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
