"""Failing loudly: error reasons by count, what a failure means, and the first-step check (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from turbogate.errors import TurbogateError
from turbogate.results.schema import RequestRecord

# What to change, by reason; a reason is "HTTP <status>" or the error's own first words.
HINTS: dict[str, str] = {
    "HTTP 401": "the target wants an API key: pass --api-key",
    "HTTP 403": "the key is not allowed this model or tier: check --api-key and --tiers",
    "HTTP 404": "the route or model does not exist: check --route and --model",
    "HTTP 400": "the target rejected the request body: check --route, --model and the token options",
    "HTTP 422": "the target rejected the request body: check --route, --model and the token options",
    "HTTP 413": "the prompt is too large for the target: lower --prompt-tokens",
    "HTTP 429": "the target shed load (a queue or rate limit was full): the offered load is past what it serves",
    "HTTP 503": "the target shed load (queue full or past its time budget): the offered load is past its capacity",
    "ClientConnectorError": "cannot connect: is the target up at --host?",
    "connection refused": "cannot connect: is the target up at --host?",
}


class BenchFailed(TurbogateError):
    """The run stopped because its requests failed (the run folder is still written)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def error_reason(r: RequestRecord) -> str | None:
    """A short, countable reason for a failed request (None when it succeeded or is unfinished)."""
    if r.ok or r.sent_s is None or r.unfinished:
        return None
    if r.status is not None and r.status != 200:
        return f"HTTP {r.status}"
    text = (r.error or "unknown error").strip()
    if "refused" in text.lower():
        return "connection refused"
    return text.split(":", 1)[0][:60]


def reasons(records: Iterable[RequestRecord]) -> Counter[str]:
    return Counter(x for x in (error_reason(r) for r in records) if x is not None)


def reasons_line(counts: Counter[str]) -> str:
    """``HTTP 401 ×116, TimeoutError ×2`` (most frequent first)."""
    return ", ".join(f"{k} ×{n}" for k, n in counts.most_common())


def hint(reason: str) -> str:
    return HINTS.get(reason, "see requests.jsonl for the full error text")


def first_step_failure(records: Iterable[RequestRecord], step: int, max_error_rate: float,
                       min_answered: int = 5) -> str | None:
    """Why the run must stop, when more than ``max_error_rate`` of ``step``'s answered requests failed for
    another reason than shedding (429/503 are the target saying it is busy: that is data, not failure)."""
    mine = [r for r in records if r.step == step and r.sent_s is not None and not r.unfinished]
    return _too_many_failed(mine, max_error_rate, min_answered, "of the first step")


def run_failure(records: Iterable[RequestRecord], max_error_rate: float) -> str | None:
    """Why a finished run failed: more than ``max_error_rate`` of all its answered requests failed (shedding
    apart), however short its steps were (the first-step check needs 5 answers in that step)."""
    answered = [r for r in records if r.sent_s is not None and not r.unfinished]
    return _too_many_failed(answered, max_error_rate, 1, "of the run")


def _too_many_failed(answered: list[RequestRecord], max_error_rate: float, min_answered: int,
                     where: str) -> str | None:
    if len(answered) < min_answered:
        return None
    failed = [r for r in answered if not r.ok and not r.shed]
    if len(failed) <= max_error_rate * len(answered):
        return None
    counts = reasons(failed)
    top = counts.most_common(1)[0][0]
    return (f"{len(failed)} of {len(answered)} requests {where} failed ({reasons_line(counts)}), over the "
            f"{max_error_rate:.0%} allowed by --max-error-rate: {hint(top)}")
