"""KV-cache block pool: a free queue like vLLM's, plus a map of which blocks are in use.

vLLM hands out blocks from the front of its free queue and returns a request's blocks to the
back in reverse order (tail blocks first), so after some churn the free blocks are scattered
over the pool.  A map of the blocks in use, built from the free queue when asked (scrapes),
measures that scatter (fragmentation) without walking Python objects: a free run is a stretch
of zero bytes.  The hot path (take, free) keeps no per-block state.

The queue is FIFO, so a block's place in it says when it will be handed out again:
``taken`` (blocks ever taken from the front) and ``appended`` (ever put at the back) let the
scheduler tell whether a freed request's blocks still hold their KV (vLLM's prefix cache).

Speed: the queue is a list read from a moving head, and every bulk operation (take n, return
a list) runs as one C-level slice or ``extend`` rather than a Python loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable
from itertools import repeat

_consume: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend  # runs an iterator to its end in C


class BlockManager:
    """Fixed pool of ``num_blocks`` KV blocks of ``block_size`` tokens each."""

    __slots__ = ("_base", "_free", "_head", "block_size", "num_blocks")

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        if num_blocks < 1:
            raise ValueError("num_blocks must be >= 1")
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: list[int] = list(range(num_blocks))  # the queue is _free[_head:]
        self._head = 0
        self._base = 0  # queue positions dropped from the front of _free so far

    @property
    def num_free(self) -> int:
        return len(self._free) - self._head

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def taken(self) -> int:
        """Queue positions handed out since the start (the front's position in the FIFO)."""
        return self._base + self._head

    @property
    def appended(self) -> int:
        """Queue positions filled since the start (the initial pool counts): the back's position."""
        return self._base + len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, 0..1 (vLLM's ``kv_cache_usage_perc`` is this fraction)."""
        return self.num_used / self.num_blocks

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def _take(self, n: int) -> list[int]:
        free = self._free
        head = self._head
        chunk = free[head:head + n]
        head += n
        if head > 1024 and 2 * head > len(free):
            del free[:head]  # drop the consumed front now and then (amortised O(1))
            self._base += head
            head = 0
        self._head = head
        return chunk

    def allocate(self, n: int, into: list[int]) -> bool:
        """Append ``n`` blocks to ``into``; False (and nothing taken) when fewer are free."""
        if n > len(self._free) - self._head:  # num_free, without the property call (hot path)
            return False
        if n > 0:
            into.extend(self._take(n))
        return True

    def allocate_each(self, holders: Collection[list[int]]) -> None:
        """Append one block to each list; the caller has checked that enough are free."""
        if holders:
            _consume(map(list.append, holders, self._take(len(holders))))

    def free(self, blocks: list[int]) -> None:
        """Return ``blocks`` to the back of the free queue, last block first (as vLLM does).

        A free that would leave more blocks free than exist is refused (a block freed twice is
        caught there; a per-block check would cost the hot path a map write per block)."""
        if len(self._free) - self._head + len(blocks) > self.num_blocks:  # (num_free + len(blocks))
            raise ValueError(f"freeing {len(blocks)} blocks would leave more than {self.num_blocks} free: "
                             "a block was freed twice")
        self._free.extend(reversed(blocks))
        blocks.clear()

    def _used_map(self) -> bytearray:
        """One byte per block, 1 = in use, built from the free queue (O(free blocks), in C)."""
        used = bytearray(b"\x01") * self.num_blocks
        _consume(map(used.__setitem__, self._free[self._head:], repeat(0)))
        return used

    def largest_free_run(self) -> int:
        """Longest stretch of consecutive free block ids."""
        # Binary search on "is there a run of k free blocks", each a C substring search: far
        # cheaper than splitting a scattered pool into thousands of runs.
        # Doubling first: a search for a short absent run scans the whole map, a long one skips.
        n_free = self.num_free
        if n_free == 0 or n_free == self.num_blocks:
            return n_free
        used = self._used_map()
        k = 1
        while k <= n_free and bytes(k) in used:
            k *= 2
        lo, hi = k // 2, min(k - 1, n_free)  # a run of lo exists; none longer than hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if bytes(mid) in used:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def fragmentation(self) -> float:
        """Share of free blocks outside the largest contiguous free run (0 = one run, → 1 = scattered)."""
        n_free = self.num_free
        if n_free == 0:
            return 0.0
        return 1.0 - self.largest_free_run() / n_free
