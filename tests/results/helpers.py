"""Synthetic runs for the results tests: a queue that saturates at a known capacity."""

from __future__ import annotations

import random

from turbogate.results import RequestRecord, Sample, Step


def saturating_run(capacity: float = 20.0, rates: tuple[float, ...] = (5, 10, 15, 20, 25, 30, 40),
                   hold: float = 10.0, tiers: tuple[str, ...] = ("turbo", "standard"),
                   service: float = 0.5, seed: int = 1) -> tuple[list[RequestRecord], list[Step], list[Sample]]:
    """A single FIFO server of ``capacity`` req/s under a stepped sweep (deterministic arrivals)."""
    rng = random.Random(seed)
    steps: list[Step] = []
    records: list[RequestRecord] = []
    free_at = 0.0
    rid = 0
    for i, rate in enumerate(rates):
        start = i * hold
        steps.append(Step(i, start, start + hold, float(rate)))
        n = int(rate * hold)
        for j in range(n):
            t = start + (j + 0.5) / rate
            begin = max(t, free_at)
            free_at = begin + 1.0 / capacity
            tier = tiers[rid % len(tiers)] if tiers else None
            ttft = (begin - t) + 0.05 + rng.random() * 0.01
            out = 16
            e2e = ttft + service
            status = 429 if rid % 50 == 7 else 200  # 2 % shed, spread evenly
            ok = status == 200
            records.append(RequestRecord(
                id=rid, step=i, offered_rps=float(rate), scheduled_s=t, sent_s=t + 0.0005, dispatch_lag_s=0.0004,
                queue_s=0.0001, end_s=t + 0.0005 + e2e if ok else t + 0.01, tier_asked=tier,
                tier_served=tier if ok else None, status=status, ok=ok, error=None if ok else "HTTP 429: shed",
                ttft_s=ttft if ok else None, itl_s=tuple([service / (out - 1)] * (out - 1)) if ok else (),
                tpot_s=(e2e - ttft) / (out - 1) if ok else None, e2e_s=e2e if ok else None,
                prompt_tokens=100 if ok else None, output_tokens=out if ok else None,
                server_timing_ms={"l1": 0.2, "l2": 0.1, "upstream": e2e * 1000} if ok else {}))
            rid += 1
    samples = [Sample(float(s), "http://gw/metrics", "turbogate_queue_depth", float(s % 7), {"tier": t})
               for s in range(int(len(rates) * hold)) for t in ("turbo", "standard")]
    samples += [Sample(float(s), "http://engine/metrics", "vllm:num_requests_running", float(s % 5))
                for s in range(int(len(rates) * hold))]
    return records, steps, samples
