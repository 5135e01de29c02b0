"""Synthetic bench runs for the verdict tests: held steps of evenly spaced requests, each one's fate decided
by the test (served in 0.5 s, or shed), summarized by the one summary code."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turbogate.results import RequestRecord, Step, Summary, summarize

# (step index, request index in the step, the step's rate) → (tier, shed?, dispatch lag in seconds)
Fate = Callable[[int, int, float], tuple[str, bool, float]]


def held_steps(rates: Sequence[float], step_s: float, fate: Fate) -> Summary:
    steps, records = [], []
    for k, rate in enumerate(rates):
        t0 = k * step_s
        steps.append(Step(k, t0, t0 + step_s, rate))
        for j in range(int(rate * step_s)):
            tier, shed, lag = fate(k, j, rate)
            s = t0 + j / rate
            records.append(RequestRecord(
                id=len(records), step=k, offered_rps=rate, scheduled_s=s, sent_s=s + lag, dispatch_lag_s=lag,
                queue_s=0.0, end_s=s + lag + (0.001 if shed else 0.5), tier_asked=tier,
                tier_served=None if shed else tier, status=503 if shed else 200, ok=not shed,
                error="shed" if shed else None, ttft_s=None if shed else 0.1, itl_s=(), tpot_s=None,
                e2e_s=None if shed else 0.5, prompt_tokens=None if shed else 256,
                output_tokens=None if shed else 128))
    return summarize(records, steps, kind="bench", started_at="2026-01-01T00:00:00Z",
                     duration_s=len(rates) * step_s, config={})
