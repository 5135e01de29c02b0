"""Per-request engine state (one object per request, not per token) and its phases."""

from __future__ import annotations

from turbogate.engine.types import Request

WAITING, PREFILL, DECODE, GONE = 0, 1, 2, 3


class Seq:
    """One request inside the engine.

    While it decodes (state DECODE) its ``output`` and ``computed`` are not updated each step:
    they follow the decode clock (``clock - out_off``, ``clock - c_off``) and are written back
    when it leaves the decode set (see :mod:`turbogate.engine.decode`).
    """

    __slots__ = (
        "admit",
        "arrival",
        "blocks",
        "bucket",
        "c_off",
        "cache_end",
        "cache_full",
        "computed",
        "new",
        "num_tokens",
        "order",
        "out_off",
        "output",
        "prompt_counted",
        "req",
        "started",
        "state",
    )

    def __init__(self, req: Request, arrival: float, order: int) -> None:
        self.req = req
        self.arrival = arrival
        self.order = order  # arrival sequence number: breaks ties between equal timestamps
        self.state = WAITING
        self.computed = 0  # tokens whose KV is in the cache
        self.num_tokens = req.prompt_tokens  # prompt + sampled output tokens
        self.output = 0
        self.blocks: list[int] = []
        self.new = 0  # prefill tokens scheduled in the step in flight
        self.admit = -1  # number of the admission that made it running (changes on re-admission)
        self.started = False  # scheduled at least once
        self.prompt_counted = False
        self.out_off = 0
        self.c_off = 0
        self.bucket = 0
        # After a preemption: its full blocks (cache_full) went to the free queue ending at position
        # cache_end, tail first; those not handed out since still hold their KV (vLLM prefix cache).
        self.cache_end = 0
        self.cache_full = 0

    def rank(self) -> tuple[int, float, int]:
        return (self.req.priority, self.arrival, self.order)
