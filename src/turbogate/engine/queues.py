"""The waiting queue (FCFS or priority) and the running requests ordered as preemption victims."""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

from turbogate.engine.seq import DECODE, GONE, PREFILL, Seq


class WaitingQueue:
    """FCFS deque or ``(priority, arrival)`` heap.  Aborted entries are dropped when they reach the
    head, or all at once when they outnumber the live ones (a low priority may never reach it)."""

    __slots__ = ("_dead", "_fifo", "_heap", "_priority", "count")

    def __init__(self, priority: bool) -> None:
        self._priority = priority
        self._fifo: deque[Seq] = deque()
        self._heap: list[tuple[tuple[int, float, int], Seq]] = []
        self.count = 0  # live entries
        self._dead = 0  # aborted entries still in the structure

    def push(self, seq: Seq, front: bool) -> None:
        if self._priority:
            heapq.heappush(self._heap, (seq.rank(), seq))
        elif front:
            self._fifo.appendleft(seq)
        else:
            self._fifo.append(seq)
        self.count += 1

    def peek(self) -> Seq | None:
        if self._priority:
            heap = self._heap
            while heap and heap[0][1].state == GONE:
                heapq.heappop(heap)
                self._dead -= 1
            return heap[0][1] if heap else None
        fifo = self._fifo
        while fifo and fifo[0].state == GONE:
            fifo.popleft()
            self._dead -= 1
        return fifo[0] if fifo else None

    def discard(self) -> None:
        """One queued request was aborted (its state is GONE)."""
        self.count -= 1
        self._dead += 1
        if self._dead > self.count + 64:
            self._heap = [e for e in self._heap if e[1].state != GONE]
            heapq.heapify(self._heap)
            self._fifo = deque(seq for seq in self._fifo if seq.state != GONE)
            self._dead = 0

    def pop(self) -> None:
        """Remove the head returned by the last :meth:`peek`."""
        if self._priority:
            heapq.heappop(self._heap)
        else:
            self._fifo.popleft()
        self.count -= 1


class Victims:
    """Running requests, the next preemption victim on top: the newest admission (FCFS) or the
    highest ``(priority, arrival)`` (priority policy), as vLLM picks them.  Lazy deletion: an
    entry is live while its request runs under the same admission; the structure is rebuilt
    when dead entries outnumber live ones.

    Under FCFS it is a stack: admission numbers only grow, so entries are added in victim
    order and the newest is at the end (no heap to sift through on every admission)."""

    __slots__ = ("_heap", "_priority")

    def __init__(self, priority: bool) -> None:
        self._priority = priority
        # Flat entries (key..., admit, seq): one tuple per entry and flat comparisons.  The key
        # decides first; an admission number is unique, so the Seq itself is never compared.
        # FCFS entries are (admit, seq), oldest first.
        self._heap: list[tuple[Any, ...]] = []

    def add(self, seq: Seq) -> None:
        if self._priority:
            heapq.heappush(self._heap, (-seq.req.priority, -seq.arrival, -seq.order, seq.admit, seq))
        else:
            self._heap.append((seq.admit, seq))

    def pop(self) -> Seq:
        heap = self._heap
        priority = self._priority
        while True:
            # IndexError = bookkeeping bug: a running request is missing
            entry = heapq.heappop(heap) if priority else heap.pop()
            seq: Seq = entry[-1]
            if seq.admit == entry[-2] and seq.state in (PREFILL, DECODE):
                return seq

    def compact(self, running: int) -> None:
        heap = self._heap
        if len(heap) > 2 * running + 64:
            self._heap = [e for e in heap if e[-1].admit == e[-2] and e[-1].state in (PREFILL, DECODE)]
            if self._priority:
                heapq.heapify(self._heap)  # (a filtered stack keeps its order)
