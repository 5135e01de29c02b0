"""Decoding sequences tracked by counts: one clock advances them all, a calendar says who finishes.

Every decoding sequence gains one token per step, so none is touched per step:

* ``clock`` counts decode steps; a member's output is ``clock - out_off`` and its cached
  tokens ``clock - c_off``;
* a completion calendar: the clock value at which a member reaches its output count → the
  members due then (a dict, so a step finds its finishers without sifting a heap);
* ``context`` = Σ cached tokens of the members, moved by ``count`` each step (``step_time``
  needs only the sum);
* KV blocks: a member writes into a new block in the step where its cached-token count is
  ≡ 0 (mod block_size), i.e. where ``clock ≡ c_off``; members are kept in ``block_size``
  buckets by ``c_off mod block_size``, so the step's new blocks are one bucket.

Stale calendar entries (members that left by preemption or abort) are skipped when their clock comes.
A ``reserve`` (:class:`~turbogate.engine.reserve.Reservation`, SGLang's admission) is told of every
join and leave.
"""

from __future__ import annotations

from turbogate.engine.reserve import Reservation
from turbogate.engine.seq import DECODE, Seq


class DecodeSet:
    __slots__ = ("_buckets", "_done", "block_size", "clock", "context", "count", "reserve")

    def __init__(self, block_size: int, reserve: Reservation | None = None) -> None:
        self.block_size = block_size
        self.reserve = reserve
        self.clock = 0
        self.count = 0
        self.context = 0
        # dicts, not sets: insertion order keeps block handout (and fragmentation) deterministic.
        self._buckets: list[dict[Seq, list[int]]] = [{} for _ in range(block_size)]  # member -> its blocks
        # finish clock -> [(admission number, member)]: a member joins with output < its count,
        # so its finish clock is later than the clock it joins at, and a tick reaches it exactly.
        self._done: dict[int, list[tuple[int, Seq]]] = {}

    def join(self, seq: Seq) -> None:
        """Start decoding ``seq`` from its current ``output`` and ``computed`` (``admit`` set)."""
        clock = self.clock
        seq.state = DECODE
        seq.out_off = clock - seq.output
        seq.c_off = clock - seq.computed
        seq.bucket = seq.c_off % self.block_size
        self._buckets[seq.bucket][seq] = seq.blocks
        self.count += 1
        self.context += seq.computed
        if self.reserve is not None:
            self.reserve.join(seq)
        at = seq.req.output_tokens + seq.out_off
        due = self._done.get(at)
        if due is None:
            self._done[at] = [(seq.admit, seq)]
        else:
            due.append((seq.admit, seq))

    def leave(self, seq: Seq) -> None:
        """Stop tracking ``seq``, writing its progress back; the caller sets its new state."""
        clock = self.clock
        seq.output = clock - seq.out_off
        seq.computed = clock - seq.c_off
        seq.num_tokens = seq.req.prompt_tokens + seq.output
        del self._buckets[seq.bucket][seq]
        self.count -= 1
        self.context -= seq.computed
        if self.reserve is not None:
            self.reserve.leave(seq)

    def output(self, seq: Seq) -> int:
        return self.clock - seq.out_off

    def needy(self) -> dict[Seq, list[int]]:
        """Members (and their block lists) that need one new KV block in the step at the current clock (live view)."""
        return self._buckets[self.clock % self.block_size]

    def members(self) -> list[Seq]:
        return [seq for bucket in self._buckets for seq in bucket]

    def tick(self) -> list[Seq]:
        """One decode step done: every member gained a token.  Returns (and drops) those that finished."""
        self.clock += 1
        self.context += self.count
        finished: list[Seq] = []
        due = self._done.pop(self.clock, None)
        if due is None:
            return finished
        if len(due) > 1:
            due.sort()  # by admission number (unique), the order the heap this replaced gave
        for admit, seq in due:
            if seq.state == DECODE and seq.admit == admit:
                self.leave(seq)
                finished.append(seq)
        return finished
