"""An emulated continuous-batching engine shaped like vLLM V1's scheduler.

Each :meth:`Engine.step` schedules one forward pass under a token budget
(``max_num_batched_tokens``): running requests first, in order, each taking one decode token
or the next chunk of its prefill (chunked prefill); then, if nothing was preempted, waiting
requests are admitted while ``max_num_seqs``, the token budget and free KV blocks allow.
Blocks are allocated only for the tokens computed in the step.  When a running request needs
a block and none is free, the engine preempts by recompute: the victim's blocks are freed and
it goes back to the front of the waiting queue; when it is rescheduled it prefills its prompt
plus the tokens it already produced, then continues.  The victim is the last running request
(FCFS) or the one with the highest ``(priority, arrival)`` (priority policy), as in vLLM.

A request that completes its prefill samples a token in the same step (its first output
token); each decode step samples one more.  The step's duration comes from the roofline model
``Deployment.step_time``.  The engine is pure: it takes ``now`` and does no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

from turbogate.engine.blocks import BlockManager
from turbogate.engine.types import EngineConfig, EngineStats, Request, StepResult, TokenEvent
from turbogate.perf import Deployment


class RequestTooLarge(ValueError):
    """The request's prompt plus output can never fit in the KV cache, even alone."""


class _Seq:
    """Mutable per-request state (one object per request, not per token)."""

    __slots__ = (
        "aborted",
        "arrival",
        "blocks",
        "computed",
        "num_tokens",
        "order",
        "output",
        "prompt_counted",
        "req",
        "scheduled_new",
        "started",
    )

    def __init__(self, req: Request, arrival: float, order: int) -> None:
        self.req = req
        self.arrival = arrival
        self.order = order  # arrival sequence number: breaks ties between equal timestamps
        self.computed = 0  # tokens whose KV is in the cache
        self.num_tokens = req.prompt_tokens  # prompt + sampled output tokens
        self.output = 0
        self.blocks: list[int] = []
        self.scheduled_new = 0  # tokens scheduled in the step being built
        self.started = False  # scheduled at least once
        self.prompt_counted = False
        self.aborted = False

    def rank(self) -> tuple[int, float, int]:
        return (self.req.priority, self.arrival, self.order)


class Engine:
    """Stepped engine: ``add_request(req, now)``, ``abort(id)``, ``step(now)``, ``stats()``."""

    def __init__(self, deployment: Deployment, config: EngineConfig | None = None) -> None:
        self.deployment = deployment
        self.config = config or EngineConfig()
        blocks = self.config.num_gpu_blocks or deployment.kv_capacity_blocks
        if blocks < 1:
            raise ValueError(f"{deployment.model.name} leaves no KV cache on {deployment.gpu.name}")
        self.blocks = BlockManager(blocks, self.config.block_size)
        self._priority = self.config.policy == "priority"
        self._waiting_fcfs: deque[_Seq] = deque()
        self._waiting_heap: list[tuple[tuple[int, float, int], _Seq]] = []
        self._num_waiting = 0
        self._running: list[_Seq] = []
        self._by_id: dict[str, _Seq] = {}
        self._order = itertools.count()
        self._num_preemptions = 0
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._finished = 0
        self._steps = 0
        self._busy_time = 0.0

    # ---- capacity ---------------------------------------------------------------------------

    @property
    def max_tokens_per_request(self) -> int:
        """Prompt + output tokens one request may hold (the whole KV cache)."""
        return self.blocks.num_blocks * self.blocks.block_size

    # ---- queue plumbing ---------------------------------------------------------------------

    def _push_waiting(self, seq: _Seq, front: bool) -> None:
        if self._priority:
            heapq.heappush(self._waiting_heap, (seq.rank(), seq))
        elif front:
            self._waiting_fcfs.appendleft(seq)
        else:
            self._waiting_fcfs.append(seq)
        self._num_waiting += 1

    def _peek_waiting(self) -> _Seq | None:
        """Head of the waiting queue, dropping aborted entries (aborts are lazy)."""
        if self._priority:
            heap = self._waiting_heap
            while heap and heap[0][1].aborted:
                heapq.heappop(heap)
            return heap[0][1] if heap else None
        queue = self._waiting_fcfs
        while queue and queue[0].aborted:
            queue.popleft()
        return queue[0] if queue else None

    def _pop_waiting(self) -> None:
        if self._priority:
            heapq.heappop(self._waiting_heap)
        else:
            self._waiting_fcfs.popleft()
        self._num_waiting -= 1

    # ---- public API -------------------------------------------------------------------------

    def add_request(self, req: Request, now: float) -> None:
        """Queue ``req`` (arrived at ``now``).  Raises RequestTooLarge if it can never fit."""
        if req.request_id in self._by_id:
            raise ValueError(f"duplicate request id {req.request_id!r}")
        # The last sampled token is never written to the cache, so P + O - 1 tokens must fit.
        if req.prompt_tokens + req.output_tokens - 1 > self.max_tokens_per_request:
            raise RequestTooLarge(
                f"request needs {req.prompt_tokens + req.output_tokens} tokens of KV cache but the engine holds "
                f"{self.max_tokens_per_request}"
            )
        seq = _Seq(req, now, next(self._order))
        self._by_id[req.request_id] = seq
        self._push_waiting(seq, front=False)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is; False if unknown or already finished."""
        seq = self._by_id.pop(request_id, None)
        if seq is None:
            return False
        seq.aborted = True
        if seq.blocks:
            self.blocks.free(seq.blocks)
        try:
            self._running.remove(seq)
        except ValueError:
            self._num_waiting -= 1  # stays in the queue structure until it reaches the head
        return True

    def has_work(self) -> bool:
        return bool(self._running) or self._num_waiting > 0

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._by_id

    def held_blocks(self) -> int:
        """Blocks held by running requests (equals ``blocks.num_used`` unless something leaked)."""
        return sum(len(seq.blocks) for seq in self._running)

    def stats(self) -> EngineStats:
        bm = self.blocks
        return EngineStats(
            running=len(self._running),
            waiting=self._num_waiting,
            kv_usage=bm.usage,
            kv_blocks_total=bm.num_blocks,
            kv_blocks_used=bm.num_used,
            fragmentation=bm.fragmentation(),
            num_preemptions=self._num_preemptions,
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._generation_tokens,
            finished=self._finished,
            steps=self._steps,
            busy_time=self._busy_time,
        )

    # ---- the step ---------------------------------------------------------------------------

    def _preempt_victim(self) -> _Seq:
        if self._priority:
            return max(self._running, key=_Seq.rank)
        return self._running[-1]

    def step(self, now: float) -> StepResult:
        """Schedule and run one forward pass starting at ``now``."""
        bm = self.blocks
        block_size = bm.block_size
        budget = self.config.max_num_batched_tokens
        running = self._running
        scheduled: list[_Seq] = []
        preempted: list[str] = []
        scheduled_first: list[str] = []

        # 1. Running requests, in order; preempt from the back when blocks run out.
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            new = min(seq.num_tokens - seq.computed, budget)
            need = -(-(seq.computed + new) // block_size) - len(seq.blocks)
            self_preempted = False
            while need > 0 and need > bm.num_free:  # most decode steps need no new block
                victim = self._preempt_victim()
                j = running.index(victim)
                del running[j]
                if victim.scheduled_new:
                    budget += victim.scheduled_new
                    victim.scheduled_new = 0
                    scheduled.remove(victim)
                bm.free(victim.blocks)
                victim.computed = 0
                self._push_waiting(victim, front=True)
                self._num_preemptions += 1
                preempted.append(victim.req.request_id)
                if victim is seq:
                    self_preempted = True
                    break
                if j < i:
                    i -= 1
            if self_preempted:
                continue
            if need > 0:
                bm.allocate(need, seq.blocks)
            seq.scheduled_new = new
            scheduled.append(seq)
            budget -= new
            i += 1

        # 2. Waiting requests, while nothing was preempted and limits allow.
        if not preempted:
            max_seqs = self.config.max_num_seqs
            while budget > 0 and len(running) < max_seqs:
                seq_or_none = self._peek_waiting()
                if seq_or_none is None:
                    break
                seq = seq_or_none
                new = min(seq.num_tokens - seq.computed, budget)
                need = -(-(seq.computed + new) // block_size) - len(seq.blocks)
                if need > bm.num_free:
                    break
                self._pop_waiting()
                bm.allocate(need, seq.blocks)
                running.append(seq)
                seq.scheduled_new = new
                scheduled.append(seq)
                budget -= new
                if not seq.started:
                    seq.started = True
                    scheduled_first.append(seq.req.request_id)

        # 3. Time the step.
        prefill = prefill_seqs = decode = decode_ctx = prefill_ctx = 0
        for seq in scheduled:
            new = seq.scheduled_new
            if new == 1 and seq.output > 0 and seq.num_tokens - seq.computed == 1:
                decode += 1
                decode_ctx += seq.computed
            else:
                prefill += new
                prefill_seqs += 1
                prefill_ctx += seq.computed
        duration = (self.deployment.step_time(prefill, decode, decode_ctx, prefill_ctx, prefill_seqs=prefill_seqs)
                    if scheduled else 0.0)

        # 4. Apply it: advance computed tokens, sample where a sequence caught up, finish.
        events: list[TokenEvent] = []
        any_finished = False
        for seq in scheduled:
            seq.computed += seq.scheduled_new
            seq.scheduled_new = 0
            if seq.computed < seq.num_tokens:
                continue  # mid-prefill chunk
            req = seq.req
            if not seq.prompt_counted:
                seq.prompt_counted = True
                self._prompt_tokens += req.prompt_tokens
            seq.output += 1
            seq.num_tokens += 1
            self._generation_tokens += 1
            if seq.output >= req.output_tokens:
                events.append(TokenEvent(req.request_id, 1, seq.output, seq.output == 1, req.finish_reason))
                bm.free(seq.blocks)
                del self._by_id[req.request_id]
                seq.aborted = True  # marks it gone for the running filter below
                self._finished += 1
                any_finished = True
            else:
                events.append(TokenEvent(req.request_id, 1, seq.output, seq.output == 1, None))
        if any_finished:
            self._running = [s for s in running if not s.aborted]
        self._steps += 1
        self._busy_time += duration
        return StepResult(duration, events, preempted, scheduled_first, prefill, decode)
