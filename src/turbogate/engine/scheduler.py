"""An emulated continuous-batching engine shaped like vLLM V1's scheduler, O(changes) per step.

A step is planned at its start (:meth:`Engine.schedule`) and takes effect at its end
(:meth:`Engine.finish_step`); :meth:`Engine.step` does both.  Under a token budget
(``max_num_batched_tokens``) a step schedules, in this order:

1. every decoding sequence, one token each (they always fit: ``max_num_batched_tokens >=
   max_num_seqs`` is enforced, as vLLM does);
2. running requests still prefilling, in admission order, each its next chunk (chunked prefill);
3. if nothing was preempted, waiting requests, while ``max_num_seqs``, the budget and free KV
   blocks for the scheduled tokens allow.

vLLM V0's scheduling is a configuration (``EngineConfig``): without chunked prefill, steps 2 and 3
come first and a step that schedules any prefill holds no decodes; with ``num_scheduler_steps = k``,
a step of decodes only starts a run of k, planned at once, that admits nothing (vLLM 0.6's
multi-step scheduling, which forces a single step where a prefill is scheduled); with
``output_lag_steps`` a first token is reported that many steps after the step that sampled it
(vLLM V0's asynchronous output processor), or with the request's finish if that comes first.
SGLang's is one too: prefill first as V0's, with ``reserve_outputs`` admitting a waiting request only
if every running request's output still fits the KV cache (:mod:`turbogate.engine.reserve`).

KV blocks of ``block_size`` tokens are allocated for the tokens computed in the step.  When
they run out the engine preempts by recompute: the victim (the newest admission under FCFS,
the highest ``(priority, arrival)`` under the priority policy) frees its blocks and returns to
the front of the waiting queue; rescheduled, it prefills prompt + tokens already produced.  A
prefilling request that would have to preempt itself stops the running pass, as in vLLM.

Approximations of vLLM, for speed: decodes go before prefill chunks in a step (vLLM walks its
running list in order, where a request still prefilling may come first); decoders short of
blocks preempt victims until the step's new blocks fit, before any is handed out (vLLM
allocates request by request, which preempts the same newest victims).

Cost per step does not grow with the batch: decoders are tracked by counts
(:mod:`turbogate.engine.decode`); only prefilling requests (few) are visited one by one, plus
one KV-block hand-out per decoder that crosses a block boundary (1/block_size of them).  The
engine is pure: it takes ``now`` and does no I/O.
"""

from __future__ import annotations

import itertools

from turbogate.engine.blocks import BlockManager
from turbogate.engine.busy import BusyMeter
from turbogate.engine.decode import DecodeSet
from turbogate.engine.queues import Victims, WaitingQueue
from turbogate.engine.reserve import Reservation
from turbogate.engine.seq import DECODE, GONE, PREFILL, WAITING, Seq
from turbogate.engine.types import EngineConfig, EngineStats, Finished, Request, StepResult
from turbogate.errors import TurbogateError
from turbogate.perf import Deployment


class RequestTooLarge(TurbogateError, ValueError):
    """The request's prompt plus output can never fit in the KV cache, even alone."""


class Engine:
    """``add_request(req, now)``, ``abort(id)``, ``step(now)`` (or ``schedule`` + ``finish_step``),
    ``output_tokens(id)``, ``stats()``."""

    def __init__(self, deployment: Deployment, config: EngineConfig | None = None) -> None:
        self.deployment = deployment
        self.config = cfg = config or EngineConfig()
        blocks = cfg.num_gpu_blocks or deployment.kv_capacity_blocks
        if blocks < 1:
            raise ValueError(f"{deployment.model.name} leaves no KV cache on {deployment.gpu.name}")
        self.blocks = BlockManager(blocks, cfg.block_size)
        self._max_tokens = blocks * cfg.block_size
        self._max_seqs = cfg.max_num_seqs
        self._token_budget = cfg.max_num_batched_tokens
        priority = cfg.policy == "priority"
        self._waiting = WaitingQueue(priority)
        self._victims = Victims(priority)
        self._reserve = Reservation(blocks, cfg.block_size, cfg.reserve_whole) if cfg.reserve_outputs else None
        self._decode = DecodeSet(cfg.block_size, self._reserve)
        self._prefill: list[Seq] = []  # running, still prefilling, in admission order
        self._by_id: dict[str, Seq] = {}
        self._order = itertools.count()
        self._admits = itertools.count()
        self._num_preemptions = 0
        self._waiting_gauge = 0
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._finished = 0
        self._steps = 0
        self._busy_time = 0.0
        #: vLLM's inter-token latency histogram's sum and count: each decode token observes its step.
        self.itl_seconds = 0.0
        self.itl_tokens = 0
        # The step in flight (between schedule and finish_step).
        self._in_flight = False
        self._start = 0.0
        self._duration = 0.0
        self._sched: list[Seq] = []
        self._preempted: list[str] = []
        self._first_sched: list[str] = []
        self._step_prefill = 0
        self._step_decode = 0
        self._decoding = True  # the step in flight advances the decoders
        self._run_left = 0  # steps left in a multi-step run (EngineConfig.num_scheduler_steps)
        self._lag = self.config.output_lag_steps
        self._held: dict[str, int] = {}  # first tokens not yet out: request id -> steps left (output lag)
        self._full = False  # reserve_outputs: the waiting head did not fit; none is tried until a request leaves
        #: DCGM-like busy shares of its steps, which the emulator exports and the simulator scrapes.
        self.busy = BusyMeter(deployment)

    # ---- capacity and queries -----------------------------------------------------------------

    @property
    def max_tokens_per_request(self) -> int:
        """Prompt + output tokens one request may hold (the whole KV cache)."""
        return self._max_tokens

    @property
    def num_running(self) -> int:
        """Requests in the running batch (O(1); ``stats()`` also measures fragmentation, which is not)."""
        return self._decode.count + len(self._prefill)

    @property
    def num_waiting(self) -> int:
        """Requests queued, preempted ones included (O(1))."""
        return self._waiting.count

    @property
    def waiting_gauge(self) -> int:
        """The waiting count as vLLM's ``num_requests_waiting`` gauge shows it: the requests that
        did not fit at the last schedule.  One that arrived since is not counted until the next
        step has had its chance to admit it (unlike ``num_waiting``, the queue right now)."""
        return self._waiting_gauge

    def has_work(self) -> bool:
        return self._decode.count > 0 or bool(self._prefill) or self._waiting.count > 0

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._by_id

    def output_tokens(self, request_id: str) -> int:
        """Output tokens the request has produced so far, 0 while its first is held back by the output lag
        (KeyError once finished or aborted)."""
        seq = self._by_id[request_id]
        if request_id in self._held:
            return 0
        return self._decode.output(seq) if seq.state == DECODE else seq.output

    def held_blocks(self) -> int:
        """Blocks held by running requests (equals ``blocks.num_used`` unless something leaked); O(running)."""
        return sum(len(seq.blocks) for seq in self._decode.members()) + sum(len(s.blocks) for s in self._prefill)

    def stats(self) -> EngineStats:
        bm = self.blocks
        return EngineStats(
            running=self.num_running,
            waiting=self.num_waiting,
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

    # ---- requests in and out ------------------------------------------------------------------

    def add_request(self, req: Request, now: float) -> None:
        """Queue ``req`` (arrived at ``now``).  Raises RequestTooLarge if it can never fit."""
        if req.request_id in self._by_id:
            raise ValueError(f"duplicate request id {req.request_id!r}")
        # The last sampled token is never written to the cache, so P + O - 1 tokens must fit.
        if req.prompt_tokens + req.output_tokens - 1 > self._max_tokens:
            raise RequestTooLarge(
                f"request needs {req.prompt_tokens + req.output_tokens} tokens of KV cache but the engine holds "
                f"{self.max_tokens_per_request}"
            )
        seq = Seq(req, now, next(self._order))
        self._by_id[req.request_id] = seq
        self._waiting.push(seq, front=False)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is; False if unknown or already finished."""
        seq = self._by_id.pop(request_id, None)
        if seq is None:
            return False
        self._held.pop(request_id, None)
        state = seq.state
        if state == DECODE:
            self._decode.leave(seq)
        elif state == PREFILL:
            self._prefill.remove(seq)  # a chunk scheduled in the step in flight is skipped at its end
        seq.state = GONE
        self._full = False
        if state == WAITING:
            self._waiting.discard()
        if seq.blocks:
            self.blocks.free(seq.blocks)
        self._victims.compact(self._decode.count + len(self._prefill))
        return True

    def _preempt(self, seq: Seq) -> None:
        if seq.state == DECODE:
            self._decode.leave(seq)
        else:
            self._prefill.remove(seq)
        bm = self.blocks
        seq.cache_full = seq.computed // bm.block_size
        bm.free(seq.blocks)
        seq.cache_end = bm.appended
        seq.computed = 0
        seq.state = WAITING
        self._waiting.push(seq, front=True)
        self._num_preemptions += 1
        self._preempted.append(seq.req.request_id)
        self._full = False

    def _cache_hit(self, seq: Seq) -> int:
        """Tokens of a preempted request whose KV is still in free blocks (0 for a new one).

        Its blocks went to the back of the free queue last block first, so they are handed out
        again tail first: the blocks not reached since form a prefix.  As vLLM does, only full
        blocks count and the last token is always recomputed (it yields the next token's logits).
        """
        if not seq.cache_full:
            return 0
        bm = self.blocks
        intact = min(seq.cache_full, seq.cache_end - bm.taken, (seq.num_tokens - 1) // bm.block_size)
        return max(0, intact) * bm.block_size

    def _admit(self, seq: Seq) -> None:
        seq.state = PREFILL
        seq.admit = next(self._admits)
        self._prefill.append(seq)
        self._victims.add(seq)

    # ---- the step -----------------------------------------------------------------------------

    def step(self, now: float) -> StepResult:
        """Schedule one forward pass at ``now`` and apply it at once."""
        self.schedule(now)
        return self.finish_step()

    def _plan_prefill(self, budget: int, decoding: bool) -> None:
        """Schedule prefill chunks under ``budget`` tokens: running prefills, then waiting requests
        (``decoding``: the step's decodes are scheduled, so a preempted decoder gives its token back)."""
        bm = self.blocks
        block_size = bm.block_size
        decode = self._decode
        victims = self._victims
        preempted, first_sched, sched = self._preempted, self._first_sched, self._sched
        # 2. Running prefills, in admission order.
        for seq in tuple(self._prefill) if self._prefill else ():
            if budget <= 0:
                break
            if seq.state != PREFILL:
                continue  # preempted earlier in this step
            new = min(seq.num_tokens - seq.computed, budget)
            need = -(-(seq.computed + new) // block_size) - len(seq.blocks)
            while need > bm.num_free:
                victim = victims.pop()
                if victim.state == DECODE:
                    budget += decoding
                elif victim.new:
                    budget += victim.new
                    victim.new = 0
                    sched.remove(victim)
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.state != PREFILL:
                break  # it preempted itself: vLLM stops scheduling running requests here
            if need > 0:
                bm.allocate(need, seq.blocks)
            seq.new = new
            sched.append(seq)
            budget -= new

        # 3. Waiting requests, while nothing was preempted and limits allow.
        waiting = self._waiting
        if not preempted and waiting.count and not self._full:
            room = self._max_seqs - decode.count - len(self._prefill)
            reserve = self._reserve
            others: list[tuple[int, int]] = []  # reserve: the requests beside the decoders, as it counts them
            while budget > 0 and room > 0:
                head = waiting.peek()
                if head is None:
                    break
                if reserve is not None and (decode.count or self._prefill):  # alone, any request fits
                    if not others:
                        others = [reserve.state(seq, decode.clock) for seq in self._prefill]
                    others.append(reserve.state(head, decode.clock))
                    if not reserve.fits(others):
                        self._full = True
                        break
                # A waiting request holds no blocks; a preempted one may find its prefix still cached.
                hit = self._cache_hit(head) if head.cache_full else 0  # (the common case, without the call)
                new = min(head.num_tokens - hit, budget)
                need = -(-(hit + new) // block_size)
                if need > bm.num_free:
                    break
                waiting.pop()
                head.computed = hit
                head.cache_full = 0
                bm.allocate(need, head.blocks)
                self._admit(head)
                head.new = new
                sched.append(head)
                budget -= new
                room -= 1
                if not head.started:
                    head.started = True
                    first_sched.append(head.req.request_id)

    def schedule(self, now: float) -> float:
        """Plan the step that starts at ``now``; returns its duration.  Its tokens count at finish_step()."""
        if self._in_flight:
            raise RuntimeError("a step is already in flight: call finish_step() first")
        bm = self.blocks
        budget = self._token_budget
        decode = self._decode
        victims = self._victims
        preempted: list[str] = []
        first_sched: list[str] = []
        sched: list[Seq] = []
        self._preempted, self._first_sched, self._sched = preempted, first_sched, sched

        # A multi-step run in progress schedules its decodes only; without chunked prefill a step that
        # admits or continues a prefill holds no decodes (vLLM V0 schedules prefills first).
        cfg = self.config
        in_run = self._run_left > 0 and decode.count > 0
        self._run_left = self._run_left - 1 if in_run else 0
        decoding = True
        if not in_run and not cfg.chunked_prefill:
            self._plan_prefill(budget, False)
            decoding = not sched
        if decoding:
            # 1. Decoders: one token each; those crossing a block boundary need a block each.
            needy = decode.needy()
            while len(needy) > bm.num_free:
                self._preempt(victims.pop())
            if needy:
                bm.allocate_each(needy.values())
            if not in_run and cfg.chunked_prefill:
                self._plan_prefill(budget - decode.count, True)
            if not sched and not in_run and decode.count:
                self._run_left = cfg.num_scheduler_steps - 1
        self._decoding = decoding

        # 4. Time it.
        prefill = prefill_ctx = 0
        for seq in sched:
            prefill += seq.new
            prefill_ctx += seq.computed
        n_dec, dec_ctx = (decode.count, decode.context) if decoding else (0, 0)
        self._duration = (self.deployment.step_time(prefill, n_dec, dec_ctx, prefill_ctx, prefill_seqs=len(sched))
                          if prefill or n_dec else 0.0)
        if self._duration:
            self.busy.step(now, self._duration, prefill, n_dec, dec_ctx, prefill_ctx, len(sched))
        self._start = now
        self._step_prefill = prefill
        self._step_decode = n_dec
        self._in_flight = True
        self._waiting_gauge = self._waiting.count
        return self._duration

    def finish_step(self) -> StepResult:
        """Apply the step in flight: count its tokens, start decodes, finish requests."""
        if not self._in_flight:
            raise RuntimeError("no step in flight: call schedule(now) first")
        self._in_flight = False
        bm = self.blocks
        decode = self._decode
        by_id = self._by_id
        first: list[str] = []
        finished: list[Finished] = []
        decoding = self._decoding
        new_tokens = decode.count if decoding else 0  # decoders aborted mid-step have left the set already
        self.itl_tokens += new_tokens
        self.itl_seconds += new_tokens * self._duration

        for seq in decode.tick() if decoding else ():
            req = seq.req
            seq.state = GONE
            bm.free(seq.blocks)
            del by_id[req.request_id]
            finished.append(Finished(req.request_id, seq.output, req.finish_reason))

        completed = False
        for seq in self._sched:
            new = seq.new
            seq.new = 0
            if seq.state != PREFILL:
                continue  # aborted mid-step
            seq.computed += new
            if seq.computed < seq.num_tokens:
                continue  # mid-prefill chunk
            completed = True
            req = seq.req
            if not seq.prompt_counted:
                seq.prompt_counted = True
                self._prompt_tokens += req.prompt_tokens
            seq.output += 1
            seq.num_tokens += 1
            new_tokens += 1
            if seq.output == 1:
                first.append(req.request_id)
            if seq.output >= req.output_tokens:
                seq.state = GONE
                bm.free(seq.blocks)
                del by_id[req.request_id]
                finished.append(Finished(req.request_id, seq.output, req.finish_reason))
            else:
                decode.join(seq)
        if completed:
            self._prefill = [seq for seq in self._prefill if seq.state == PREFILL]
        if finished:
            self._full = False
            self._finished += len(finished)
            self._victims.compact(decode.count + len(self._prefill))
        if self._lag:
            first = self._lagged(first, finished)
        self._generation_tokens += new_tokens
        self._steps += 1
        self._busy_time += self._duration
        self._sched = []
        return StepResult(self._start, self._duration, first, finished, self._preempted, self._first_sched,
                          self._step_prefill, self._step_decode, new_tokens)

    def _lagged(self, sampled: list[str], finished: list[Finished]) -> list[str]:
        """The first tokens that reach the client at this step's end: those held ``output_lag_steps`` steps,
        and a held one whose request finished (its last output is processed at once).  ``sampled`` are
        this step's new first tokens; they are held from now."""
        held = self._held
        out: list[str] = []
        if held:
            for rid in tuple(held):
                left = held[rid] - 1
                if left < 1:
                    del held[rid]
                    out.append(rid)
                else:
                    held[rid] = left
        for rid in sampled:
            held[rid] = self._lag
        for done in finished:
            if held.pop(done.request_id, None) is not None:
                out.append(done.request_id)
        return out
