"""Turbo at 2× overload when the gateway's controller is slow next to its engines (issue 19).

``benchmarks/turbo_isolation.py`` runs emulators at ``--time-scale 0.2``: each 1 s scrape spans
5 s of engine time, so every learned quantity (concurrency limits, slow start, probes) moves five
times slower relative to the engines than on a real fleet.  The simulator reproduces that with a
5 s scrape interval at time scale 1, and this is where the core's edge rules showed: a limit cut
above what the engine runs, slots shrunk to the in-flight count between scrapes, a Turbo burst
making Standard *owed*, headroom too small for Turbo's own swing over a service time, and a
stalled slow start sending Turbo into an engine's queue (or starving it on a cold gateway).
"""

from __future__ import annotations

from tests.sim.helpers import KEY, MODEL, load
from turbogate.config import hash_key, parse_config
from turbogate.results.percentile import percentile
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate

CAPACITY = 3.32  # req/s: two L4s × 16 seqs of Llama-3.1-8B, 256 / 128 tokens (the engine model's saturated rate)
MIX = "turbo=0.2,standard=0.75,relax=0.05"


def run(qps: float, seed: int, duration: float = 250.0) -> list[object]:
    gateway = parse_config({
        "tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "scrape": {"interval_s": 5.0},  # the defaults otherwise: no max_concurrency, no tier policy
        "pools": [{"name": "p", "models": [MODEL], "replicas": [{"url": "http://a"}, {"url": "http://b"}]}],
    })
    # The rates below were set against the base perf model's capacity (issue 40's profiles came later).
    fleet = parse_fleet({"pools": [{"name": "p", "replicas": [{"count": 2, "gpu": "L4", "model": MODEL,
                                                                "max_num_seqs": 16, "engine_profile": "base"}]}]})
    ld = load(qps=qps, duration=duration, prompt_tokens="256", output_tokens="128", tiers=MIX, random_seed=seed)
    return list(simulate(SimConfig(gateway=gateway, fleet=fleet, load=ld, api_keys=(KEY,))).records)


def turbo_p95(records: list[object], after: float) -> float:
    ttfts = sorted(r.ttft_s for r in records  # type: ignore[attr-defined]
                   if r.tier_asked == "turbo" and r.ok and r.scheduled_s >= after)  # type: ignore[attr-defined]
    return ttfts[int(0.95 * len(ttfts))]


def test_a_cold_gateway_keeps_turbo_fast_and_unshed_at_twice_capacity() -> None:
    ratios = []
    for seed in range(4):
        unloaded = turbo_p95(run(0.2 * CAPACITY, seed), after=0.0)
        records = run(2.0 * CAPACITY, seed)
        # Measured after 50 s (ten scrapes: the limits learnt), as the benchmark skips its warm-up.
        ratios.append(turbo_p95(records, after=50.0) / unloaded)
        # From the cold start on, no Turbo request is shed.
        assert not [r for r in records if r.tier_asked == "turbo" and r.status in (429, 503)], seed  # type: ignore[attr-defined]
        done = [r for r in records if r.ok]  # type: ignore[attr-defined]
        assert sum(r.tier_served == "standard" for r in done) / len(done) >= 0.2  # type: ignore[attr-defined]
        assert any(r.tier_served == "relax" for r in done)  # type: ignore[attr-defined]
    # A burst of Turbo larger than the headroom still makes a few wait now and then (one seed of
    # four here reaches 2.8×); before these rules two of the four passed 1.5×, up to 3×, and
    # Turbo was shed in two.
    assert sorted(ratios)[2] <= 1.5, ratios
    assert max(ratios) <= 4.0, ratios


def test_a_cold_gateway_at_a_fifth_of_capacity_holds_no_tier_back() -> None:
    """No ``max_num_seqs`` configured: the limits start at 8 a replica and are learnt.  At 0.2×,
    about 12 of those 16 slots are busy now and then, past Relax's holdback line (0.7) and under
    slow start's bar (0.8 of a limit): before the learning pool's rules (sched/admission.py
    ``_calm``, concurrency.py ``adapt_limit``'s ``held``) Relax's p95 reached 3–32× Turbo's in
    four seeds of twelve.  Relax sends about a dozen requests a run here, so its p95 is its
    slowest but one: one request held behind a Turbo clump at Turbo's ceiling is a miss (seed 7,
    3.2×)."""
    ratios = []
    for seed in range(12):
        records = [r for r in run(0.2 * CAPACITY, seed) if r.ok]  # type: ignore[attr-defined]
        p95s = {tier: percentile([r.ttft_s for r in records if r.tier_served == tier], 95)  # type: ignore[attr-defined]
                for tier in ("turbo", "standard", "relax")}
        ratios.append(max(p95s["standard"] or 0.0, p95s["relax"] or 0.0) / (p95s["turbo"] or 1.0))
    assert sum(ratio <= 1.5 for ratio in ratios) >= 11 and max(ratios) <= 4.0, ratios
