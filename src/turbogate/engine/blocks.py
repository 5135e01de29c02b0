"""KV-cache block pool: a free queue like vLLM's, plus a map of which blocks are in use.

vLLM hands out blocks from the front of its free queue and returns a request's blocks to the
back in reverse order (tail blocks first), so after some churn the free blocks are scattered
over the pool.  The map lets us measure that scatter (fragmentation) without walking Python
objects: a free run is a stretch of zero bytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class BlockManager:
    """Fixed pool of ``num_blocks`` KV blocks of ``block_size`` tokens each."""

    __slots__ = ("_free", "_used", "block_size", "num_blocks")

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        if num_blocks < 1:
            raise ValueError("num_blocks must be >= 1")
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))
        self._used = bytearray(num_blocks)  # 1 = allocated

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, 0..1 (vLLM's ``kv_cache_usage_perc`` is this fraction)."""
        return self.num_used / self.num_blocks

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def allocate(self, n: int, into: list[int]) -> bool:
        """Append ``n`` blocks to ``into``; False (and nothing taken) when fewer are free."""
        free = self._free
        if n > len(free):
            return False
        used = self._used
        for _ in range(n):
            block = free.popleft()
            used[block] = 1
            into.append(block)
        return True

    def allocate_each(self, holders: Iterable[list[int]]) -> None:
        """Append one block to each list; the caller has checked that enough are free."""
        free = self._free
        used = self._used
        for into in holders:
            block = free.popleft()
            used[block] = 1
            into.append(block)

    def free(self, blocks: list[int]) -> None:
        """Return ``blocks`` to the back of the free queue, last block first (as vLLM does)."""
        used = self._used
        for block in reversed(blocks):
            if not used[block]:
                raise ValueError(f"block {block} freed twice")
            used[block] = 0
            self._free.append(block)
        blocks.clear()

    def largest_free_run(self) -> int:
        """Longest stretch of consecutive free block ids."""
        if not self._free:
            return 0
        return max(len(run) for run in self._used.split(b"\x01"))

    def fragmentation(self) -> float:
        """Share of free blocks outside the largest contiguous free run (0 = one run, → 1 = scattered)."""
        n_free = len(self._free)
        if n_free == 0:
            return 0.0
        return 1.0 - self.largest_free_run() / n_free
