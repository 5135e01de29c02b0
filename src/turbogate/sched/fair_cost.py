"""A request's fair-queue cost: estimated at admission, corrected to what it used when it ends.

L1 shares a tier among tenants by start-time fair queueing on tokens (sched/tier_queue.py): a
request advances its tenant's finish tag by its cost.  The cost known at admission is the
declared ``max_tokens`` (plus the prompt's estimate), and a declared bound can be far above what
answers use: one stream declaring 131,000 tokens, dropped at once, pushed its tenant's tag so far
ahead that its next Standard requests waited behind everyone's, or were shed.  Two rules:

* **At admission** (``AnswerLengths.cost_tokens``): where the declared bound is more than
  ``FAR`` × the 95th percentile of the answer lengths the model was seen giving (once it has
  ``MIN_SAMPLES``), the cost counts ``FAR`` × that percentile instead.  A request whose answer
  then runs longer is charged the rest when it ends, so an estimate buys no more than its share.
* **At the end** (``settle``): finished, failed, refused, shed or cancelled, the tenant's tag is
  corrected by the difference between the cost charged and the cost used — the prompt's part
  and the answer tokens it got (none for one that never ran).

Pure: the flow calls ``cost_tokens`` in ``open``, ``observe`` when an answer is complete and
``settle`` when a request leaves L1.
"""

from __future__ import annotations

from collections import deque

from turbogate.percentile import percentile
from turbogate.sched.actions import FlowRequest
from turbogate.sched.admission import Admission

FAR = 4.0  # a declared bound this many times the usual answer's length is "far above"
MIN_SAMPLES = 32  # answers seen before the estimate is trusted
WINDOW = 512  # recent answers per model the percentile is taken over
REFRESH = 32  # answers between two computations of the percentile


class _Lengths:
    __slots__ = ("p95", "recent", "since")

    def __init__(self) -> None:
        self.recent: deque[int] = deque(maxlen=WINDOW)
        self.p95 = 0.0
        self.since = 0  # answers since the percentile was computed


class AnswerLengths:
    """Recent completion lengths per model, and the cost rule built on them."""

    def __init__(self) -> None:
        self._models: dict[str, _Lengths] = {}

    def observe(self, model: str, completion_tokens: int) -> None:
        """A complete answer of ``completion_tokens`` tokens (0: not reported; ignored)."""
        if completion_tokens <= 0:
            return
        lengths = self._models.get(model)
        if lengths is None:
            lengths = self._models[model] = _Lengths()
        lengths.recent.append(completion_tokens)
        lengths.since += 1
        if lengths.since >= REFRESH or (len(lengths.recent) == MIN_SAMPLES and not lengths.p95):
            lengths.p95 = percentile(lengths.recent, 95.0) or 0.0
            lengths.since = 0

    def cost_tokens(self, model: str, declared: int) -> int:
        """The answer tokens a request declaring ``declared`` is charged at admission."""
        lengths = self._models.get(model)
        if lengths is None or len(lengths.recent) < MIN_SAMPLES or not lengths.p95:
            return declared
        bound = int(FAR * lengths.p95) + 1
        return bound if declared > bound else declared

    def p95(self, model: str) -> float | None:
        lengths = self._models.get(model)
        return lengths.p95 if lengths is not None and lengths.p95 else None


def used_cost(req: FlowRequest, cap: float, now: float, token_gap_s: float | None) -> float:
    """The cost ``req`` used: its prompt's part of the charged cost, and the answer tokens it got.
    A stream that ended without a token count (its client left) is charged the tokens its
    replica makes in the time it answered (``token_gap_s``: its measured gap between tokens),
    or, without that measure, all it was charged: leaving early must not buy a cheaper share."""
    prompt = req.cost * req.prefill_share
    answer = float(req.completion_tokens)
    if not answer and req.first_byte_at is not None:
        if token_gap_s is None or token_gap_s <= 0:
            return req.cost
        answer = 1.0 + (now - req.first_byte_at) / token_gap_s
    return min(prompt + answer, 2.0 * cap)


def settle(admission: Admission, req: FlowRequest, cap: float, now: float, token_gap_s: float | None) -> None:
    """Correct ``req``'s tenant's fair-queue tag to the cost it used (``req.ticket`` still set)."""
    ticket = req.ticket
    if ticket is None:
        return
    admission.recharge(ticket, used_cost(req, cap, now, token_gap_s))
