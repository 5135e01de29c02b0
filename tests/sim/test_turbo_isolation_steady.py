"""``benchmarks/turbo_isolation.py``'s run in virtual time: Turbo's p95 TTFT at 2× of capacity,
after a warm-up, against its p95 at 0.2× on the same gateway (issue 19).

Two L4s × 16 seqs of Llama-3.1-8B at the emulator's engine profile, limits learned (no
``max_num_seqs`` in the gateway's config), the benchmark's 5-s scrape interval in engine time
(its 1 s at ``--time-scale 0.2``), 0.2× then 2× in one run, each step 50 s of wall time; the 2×
step is measured after its first 10 s.  Unlike the slow-controller test (separate cold runs at
the base profile) the light load comes first, so the limits the 2× step meets are the ones the
quiet minute taught.  What it guards: Turbo's headroom while a limit is still learnt
(sched/admission.py ``_room``).  Wider than the slots above slow start's bar, it leaves the lower
tiers short of the bar slow start grows on, slow start stalls above the engine's batch, the slots
it counts whole there are no engine's, and Turbo waits in the gateway for them (3.4–5.2× here).
"""

from __future__ import annotations

from turbogate.bench.options import build_load
from turbogate.config import hash_key, parse_config
from turbogate.engine import EngineConfig
from turbogate.engine.capacity import saturated_rate
from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.results.percentile import percentile
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate

KEY = "sk-isolation"
MODEL = "llama-3.1-8b"
MIX = "turbo=0.2,standard=0.75,relax=0.05"
SCALE = 0.2  # the benchmark's emulator time scale: wall seconds per engine second
HOLD_S, WARMUP_S = 50.0, 10.0  # wall seconds


def turbo_ratio(seed: int) -> tuple[float, int]:
    """Turbo's p95 TTFT at 2× (after the warm-up) ÷ at 0.2×, and the Turbo requests shed at 2×."""
    cap = 2 * saturated_rate(deployment(get_gpu("L4"), resolve_model(MODEL)), EngineConfig(max_num_seqs=16), 256, 128)
    gateway = parse_config({
        "tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "scrape": {"interval_s": 1.0 / SCALE},
        "pools": [{"name": "p", "models": [MODEL], "replicas": [{"url": "http://a"}, {"url": "http://b"}]}],
    })
    fleet = parse_fleet({"pools": [{"name": "p", "replicas": [
        {"count": 2, "gpu": "L4", "model": MODEL, "max_num_seqs": 16}]}]})
    load = build_load(shape="steps", qps=None, qps_start=0.2 * cap, qps_end=2.0 * cap, steps=2,
                      duration=2 * HOLD_S / SCALE, arrivals="poisson", burstiness=1.0, prompt_tokens="256",
                      output_tokens="128", dataset=None, no_seed=False, tiers=MIX, n_api_keys=1, random_seed=seed,
                      slo=None, knee_method="throughput", knee_k=2.0, knee_metric="e2e", fleet_cost=1.0,
                      tier_cost=None)
    records = list(simulate(SimConfig(gateway=gateway, fleet=fleet, load=load, api_keys=(KEY,))).records)
    heavy_from = (HOLD_S + WARMUP_S) / SCALE
    turbo = [r for r in records if r.tier_asked == "turbo"]
    light = [r.ttft_s for r in turbo if r.ok and r.ttft_s is not None and r.scheduled_s < HOLD_S / SCALE]
    heavy = [r.ttft_s for r in turbo if r.ok and r.ttft_s is not None and r.scheduled_s >= heavy_from]
    base, hot = percentile(light, 95), percentile(heavy, 95)
    assert base is not None and hot is not None
    shed = sum(1 for r in turbo if r.scheduled_s >= heavy_from and r.status in (429, 503))
    return hot / base, shed


def test_turbo_keeps_its_latency_at_twice_capacity_after_a_quiet_start() -> None:
    results = [turbo_ratio(seed) for seed in (1, 2, 3)]
    assert all(shed == 0 for _, shed in results), results
    # The benchmark's target is 1.5×; 2× leaves room for a seed's burst without passing a broken run.
    assert max(ratio for ratio, _ in results) <= 2.0, results
