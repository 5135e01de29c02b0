"""The engine's scheduling rules written the slow, obvious way: every running request touched
every step, KV blocks as plain counts.  The count-based Engine must agree with it step by step."""

from __future__ import annotations

from dataclasses import dataclass, field

from turbogate.engine import EngineConfig, Request
from turbogate.perf import Deployment


@dataclass
class RefSeq:
    req: Request
    arrival: float
    order: int
    computed: int = 0
    output: int = 0
    blocks: int = 0
    decoding: bool = False
    started: bool = False
    admit: int = -1
    new: int = 0
    cache_end: int = 0  # after a preemption: queue position past its freed blocks
    cache_full: int = 0  # full blocks it had computed when preempted

    @property
    def num_tokens(self) -> int:
        return self.req.prompt_tokens + self.output

    def rank(self) -> tuple[int, float, int]:
        return (self.req.priority, self.arrival, self.order)


@dataclass
class RefStep:
    duration: float
    first_token: list[str] = field(default_factory=list)
    finished: list[tuple[str, int, str]] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    scheduled_first: list[str] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_seqs: int = 0


class RefEngine:
    def __init__(self, dep: Deployment, config: EngineConfig, num_blocks: int) -> None:
        self.dep, self.cfg, self.free = dep, config, num_blocks
        self.bs = config.block_size
        self.running: list[RefSeq] = []  # admission order
        self.waiting: list[RefSeq] = []
        self.by_id: dict[str, RefSeq] = {}
        self.orders = 0
        self.admits = 0
        # The free queue as two counters: positions handed out and positions filled (FIFO).
        self.taken = 0
        self.appended = num_blocks

    def add(self, req: Request, now: float) -> None:
        seq = RefSeq(req, now, self.orders)
        self.orders += 1
        self.by_id[req.request_id] = seq
        self.waiting.append(seq)
        self._sort_waiting()

    def _sort_waiting(self) -> None:
        if self.cfg.policy == "priority":
            self.waiting.sort(key=RefSeq.rank)

    def abort(self, rid: str) -> None:
        seq = self.by_id.pop(rid)
        if seq in self.running:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self._release(seq)

    def output_tokens(self, rid: str) -> int:
        return self.by_id[rid].output

    def _victim(self) -> RefSeq:
        if self.cfg.policy == "priority":
            return max(self.running, key=RefSeq.rank)
        return max(self.running, key=lambda s: s.admit)

    def _preempt(self, seq: RefSeq, out: RefStep) -> None:
        self.running.remove(seq)
        seq.cache_full = seq.computed // self.bs
        self._release(seq)
        seq.cache_end = self.appended
        seq.blocks = seq.computed = 0
        seq.decoding = False
        self.waiting.insert(0, seq)
        self._sort_waiting()
        out.preempted.append(seq.req.request_id)

    def _release(self, seq: RefSeq) -> None:
        self.free += seq.blocks
        self.appended += seq.blocks
        seq.blocks = 0

    def _take(self, n: int) -> None:
        self.free -= n
        self.taken += n

    def _hit(self, seq: RefSeq) -> int:
        """Full blocks freed at preemption that the queue has not handed out again (tail ones go first)."""
        if not seq.cache_full:
            return 0
        return max(0, min(seq.cache_full, seq.cache_end - self.taken, (seq.num_tokens - 1) // self.bs)) * self.bs

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def step(self) -> RefStep:
        out = RefStep(0.0)
        budget = self.cfg.max_num_batched_tokens
        needy = [s for s in self.running if s.decoding and s.computed % self.bs == 0]
        while len(needy) > self.free:
            victim = self._victim()
            self._preempt(victim, out)
            needy = [s for s in needy if s is not victim]
        for s in needy:
            s.blocks += 1
            self._take(1)
        decoders = [s for s in self.running if s.decoding]
        budget -= len(decoders)
        sched: list[RefSeq] = []
        for seq in [s for s in self.running if not s.decoding]:
            if budget <= 0:
                break
            if seq not in self.running:
                continue
            new = min(seq.num_tokens - seq.computed, budget)
            need = self._blocks_for(seq.computed + new) - seq.blocks
            while need > self.free:
                victim = self._victim()
                if victim.decoding:
                    budget += 1
                    decoders.remove(victim)
                elif victim in sched:
                    budget += victim.new
                    sched.remove(victim)
                self._preempt(victim, out)
                if victim is seq:
                    break
            if seq not in self.running:
                break
            seq.blocks += need
            self._take(need)
            seq.new = new
            sched.append(seq)
            budget -= new
        if not out.preempted:
            while budget > 0 and len(self.running) < self.cfg.max_num_seqs and self.waiting:
                head = self.waiting[0]
                hit = self._hit(head)
                new = min(head.num_tokens - hit, budget)
                need = self._blocks_for(hit + new)
                if need > self.free:
                    break
                self.waiting.pop(0)
                head.computed, head.cache_full = hit, 0
                self.running.append(head)
                head.admit = self.admits
                self.admits += 1
                head.blocks, head.new = need, new
                self._take(need)
                sched.append(head)
                budget -= new
                if not head.started:
                    head.started = True
                    out.scheduled_first.append(head.req.request_id)
        out.prefill_tokens = sum(s.new for s in sched)
        out.decode_seqs = len(decoders)
        if sched or decoders:
            out.duration = self.dep.step_time(out.prefill_tokens, len(decoders), sum(s.computed for s in decoders),
                                              sum(s.computed for s in sched), prefill_seqs=len(sched))
        for s in decoders:
            s.computed += 1
            self._sample(s, out)
        for s in sched:
            s.computed += s.new
            if s.computed == s.num_tokens:
                s.decoding = True
                self._sample(s, out)
        return out

    def _sample(self, s: RefSeq, out: RefStep) -> None:
        s.output += 1
        if s.output == 1:
            out.first_token.append(s.req.request_id)
        if s.output >= s.req.output_tokens:
            self.running.remove(s)
            self._release(s)
            del self.by_id[s.req.request_id]
            out.finished.append((s.req.request_id, s.output, s.req.finish_reason))
