"""SGLang's admission rule: a waiting request joins a prefill batch only if its output can be reserved.

SGLang (0.3 – 0.4, ``PrefillAdder`` in ``python/sglang/srt/managers/schedule_policy.py``) runs a
prefill batch, alone, whenever waiting requests fit (prefill first; mixing with decodes needs
``--enable-mixed-chunk``, off by default).  It fills the batch in FCFS order up to its chunk size,
and admits a request only if every running request, those already in the batch and the candidate can
each produce its remaining output without the KV pool running out, so nothing is ever retracted.
For requests whose output length is known (``ignore_eos``, as ``bench_serving`` sends them, with the
radix cache off) it checks that by walking the requests in order of tokens left: at request ``i``'s
turn, the ``n - i`` not yet finished all grow for as many steps as the next one has left (the last:
its own), against what is free now plus what the ``i`` shorter ones hold now.  The engine knows every
request's output, so it applies this check to all.  Once a candidate fails, nothing is tried again
until a request leaves (SGLang's ``batch_is_full``).

That is what makes it cheap here: every decoder grows one token per step, so in terms of its finish
clock ``F`` (tokens left = ``F - clock``) and ``b`` = tokens held − clock, the check does not move with
the clock: with ``C`` the pool's tokens and the requests sorted by ``F``, request ``i``'s turn asks
``C − Σ_{j ≥ i} b_j − F_next · (n − i) > 0``.  :class:`Reservation` keeps the decoders' ``(F, b)``
sorted as they join and leave (:class:`~turbogate.engine.decode.DecodeSet` tells it), and a check
is a few list operations at C speed.  KV blocks hold ``block_size`` tokens where SGLang's pages hold
one, so each request is counted ``block_size − 1`` tokens larger.

TensorRT-LLM's default capacity scheduler (``GUARANTEED_NO_EVICT``) never evicts either, but counts
more simply: a request is admitted only if every running request at its final length, and the
candidate at its own, fit the pool together (``whole``): it does not credit the blocks that requests
finishing earlier will have freed.

Not modelled: the ``new_token_ratio`` estimate SGLang uses for requests that may stop early, and the
``max_prefill_tokens`` cap (16,384 by default, above the 8,192-token chunk that binds first).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate
from operator import add, mul

from turbogate.engine.seq import Seq


def held(tokens: int, block_size: int) -> int:
    """KV tokens a request holding ``tokens`` occupies: whole blocks."""
    return -(-tokens // block_size) * block_size


class Reservation:
    """The running decoders' ``(F, b)``, sorted by ``F`` (parallel lists)."""

    __slots__ = ("_b", "_f", "_final", "block_size", "capacity", "whole")

    def __init__(self, num_blocks: int, block_size: int, whole: bool = False) -> None:
        self.block_size = block_size
        self.capacity = num_blocks * block_size
        self.whole = whole  # TensorRT-LLM's count: every request at its final length at once
        self._f: list[int] = []  # SGLang's walk only: ``whole`` keeps the sum alone
        self._b: list[int] = []
        self._final = 0  # Σ (F + b): the decoders' tokens at their final lengths

    def _key(self, seq: Seq) -> tuple[int, int]:
        # A decoder's output is clock − out_off: it finishes at output_tokens + out_off and holds
        # prompt + output tokens, at most block_size − 1 short of its blocks.
        return seq.req.output_tokens + seq.out_off, seq.req.prompt_tokens - seq.out_off + self.block_size - 1

    def join(self, seq: Seq) -> None:
        f, b = self._key(seq)
        self._final += f + b
        if self.whole:
            return  # its check reads the sum alone
        i = bisect_right(self._f, f)
        self._f.insert(i, f)
        self._b.insert(i, b)

    def leave(self, seq: Seq) -> None:
        f, b = self._key(seq)
        self._final -= f + b
        if self.whole:
            return
        fs, bs = self._f, self._b
        i = bisect_left(fs, f)
        while bs[i] != b:  # equal keys are interchangeable: drop the first that matches
            i += 1
        del fs[i], bs[i]

    def state(self, seq: Seq, clock: int) -> tuple[int, int]:
        """``(F, b)`` of a request not decoding (prefilling or waiting): its whole prompt held, its
        output left from now, as SGLang counts the requests of the batch it is filling."""
        return clock + seq.req.output_tokens - seq.output, held(seq.num_tokens, self.block_size) - clock

    def fits(self, others: list[tuple[int, int]]) -> bool:
        """SGLang's check over the decoders and ``others`` (prefilling requests and candidates, ``state``),
        or with ``whole`` TensorRT-LLM's: all of them at their final lengths at once."""
        if self.whole:
            return self._final + sum(f + b for f, b in others) <= self.capacity
        fs, bs = self._f[:], self._b[:]
        for f, b in others:
            i = bisect_right(fs, f)
            fs.insert(i, f)
            bs.insert(i, b)
        n = len(fs)
        if not n:
            return True
        suffix = list(accumulate(reversed(bs)))
        suffix.reverse()
        nxt = fs[1:]
        nxt.append(fs[-1])
        peak: int = max(map(add, suffix, map(mul, nxt, range(n, 0, -1))))
        return peak < self.capacity
