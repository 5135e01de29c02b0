"""The burst question of ``overload_soak.py`` in virtual time (issue 43): the gateway's own core
over the emulator's engine model, no process and no clock, seconds a seed.

``simulated`` draws its own arrivals per fleet and mix (``--simulate``); ``replayed`` sends the
real run's seeded schedule (``soak_measure.real_schedule``) on the real run's fleet
(``--replay``), so a slow stretch of a real run can be told apart: the machine's, or the
schedule's.  Each engine runs ``1 / SCALE`` times faster than the perf model's (the emulator's
``--time-scale``), so virtual seconds are the real run's wall seconds.  Both run the same
arrivals again without the burst, the control the recovery figures are set against."""

from __future__ import annotations

import math
from typing import Any

from soak_measure import BASE_MIX, KEY, MIX, burst_figures, real_schedule
from turbo_isolation import GPU, MODEL, OUTPUT, PROMPT, SCALE, SEQS, capacity_rps
from turbogate.config import hash_key, parse_config

#: The simulated fleets (replicas, sequences each) and tier mixes (the burst's, the mixed load's),
#: fixed before any tuning.
SIM_FLEETS = {"2xL4": (2, SEQS), "4xL4s8": (4, 8)}
SIM_MIXES = {"issue": (MIX, BASE_MIX),
             "std": ((("turbo", 0.05), ("standard", 0.55), ("relax", 0.4)),
                     (("turbo", 0.15), ("standard", 0.65), ("relax", 0.2)))}


def _mix_text(mix: tuple[tuple[str, float], ...]) -> str:
    return ",".join(f"{t}={w}" for t, w in mix)


def _faster(dep: Any, k: float) -> Any:
    """``dep`` with every step ``k`` times shorter (the emulator's ``--time-scale`` 1/k): compute,
    bandwidth and host overheads alike; memory, hence the KV cache, unchanged."""
    from dataclasses import replace

    gpu, f = dep.gpu, dep.factors
    gpu = replace(gpu, hbm_bandwidth=k * gpu.hbm_bandwidth, bf16_flops=k * gpu.bf16_flops,
                  fp8_flops=None if gpu.fp8_flops is None else k * gpu.fp8_flops,
                  link_bandwidth=k * gpu.link_bandwidth)
    f = replace(f, step_overhead_s=f.step_overhead_s / k, per_seq_overhead_s=f.per_seq_overhead_s / k,
                tp_allreduce_s=f.tp_allreduce_s / k, frontend_s=f.frontend_s / k,
                frontend_per_token_s=f.frontend_per_token_s / k, tp_allreduce_growth_s=f.tp_allreduce_growth_s / k,
                decode_allreduce_s=None if f.decode_allreduce_s is None else f.decode_allreduce_s / k)
    return replace(dep, gpu=gpu, factors=f)


Segments = list[tuple[float, float, float, tuple[tuple[str, float], ...]]]


def sim_sent(replicas: int, seqs: int, segments: Segments, warmup: Segments, seed: int,
             probe: Any = None, skip: frozenset[int] = frozenset(),
             schedule: list[tuple[float, str]] | None = None) -> list[tuple[float, str, float]]:
    """Run ``segments`` ((start, seconds, rate, mix), rates in wall requests/s) through the
    gateway's core on ``replicas`` faster engines in virtual time, after the unrecorded
    ``warmup`` segments: (send time, tier, TTFT; inf: shed or no first token) per request, as
    ``Load.sent``.  ``probe(sim)``: called before the run.  ``skip``: indices of segments left
    out, the others' arrivals unchanged (each segment draws its own).  ``schedule``: (send time,
    tier) of every request instead of the segments' draws (``real_schedule``)."""
    from turbogate.bench.options import build_load
    from turbogate.configpolicy import flow_policy
    from turbogate.engine import Engine, EngineLoop
    from turbogate.sched.flow import Flow
    from turbogate.sim.build import SimConfig, build_replicas
    from turbogate.sim.core import Simulation
    from turbogate.sim.fleet import parse_fleet
    from turbogate.sim.requests import RequestSource

    gateway = parse_config({
        "tenants": [{"name": "soak", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "main", "models": [MODEL], "replicas": [{"url": f"http://r{i}"} for i in range(replicas)]}],
    })
    fleet = parse_fleet({"pools": [{"name": "main", "replicas": [
        {"count": replicas, "gpu": GPU, "model": MODEL, "max_num_seqs": seqs}]}]})

    def load(rate: float, seconds: float, mix: tuple[tuple[str, float], ...], part: int) -> Any:
        return build_load(shape="constant", qps=rate, qps_start=None, qps_end=None, steps=1, duration=seconds,
                          arrivals="poisson", burstiness=1.0, prompt_tokens=str(PROMPT), output_tokens=str(OUTPUT),
                          dataset=None, no_seed=False, tiers=_mix_text(mix), n_api_keys=1,
                          random_seed=seed * 1000 + part, slo=None, knee_method="throughput", knee_k=2.0,
                          knee_metric="e2e", fleet_cost=1.0, tier_cost=None)

    def requests(parts: Segments, offset: int) -> list[Any]:
        merged = sorted((start + r.t, part, r) for part, (start, seconds, rate, mix) in enumerate(parts)
                        if offset or part not in skip for r in RequestSource(load(rate, seconds, mix, offset + part)))
        return [r._replace(id=i, t=t, step=0) for i, (t, _, r) in enumerate(merged)]

    if schedule is not None:
        like = next(iter(RequestSource(load(1.0, 10.0, BASE_MIX, 0))))
        recorded = [like._replace(id=i, t=t, step=0, tier=tier) for i, (t, tier) in enumerate(schedule)]
    else:
        recorded = requests(segments, 0)
    warm = [r._replace(id=-1 - r.id) for r in requests(warmup, 100)]
    warmup_s = max(start + seconds for start, seconds, _, _ in warmup)
    first = segments[0]
    sc = SimConfig(gateway=gateway, fleet=fleet, load=load(first[2], first[1], first[3], 0))
    reps, specs = build_replicas(sc)
    for rep in reps:
        rep.deployment = _faster(rep.deployment, 1.0 / SCALE)
        rep.loop = EngineLoop(Engine(rep.deployment, rep.config))
    flow = Flow(flow_policy(gateway, pools=specs, mode="turbogate"))
    sim = Simulation(flow, reps, recorded, model=MODEL, tenants=["soak"],
                     scrape_interval_s=gateway.scrape.interval_s, warmup=warm, warmup_s=warmup_s)
    if probe is not None:
        probe(sim)
    return [(r.scheduled_s, str(r.tier_asked), r.ttft_s if r.ok and r.ttft_s is not None else math.inf)
            for r in sim.run() if r.id >= 0]


def simulated(seed: int, fleet: str, mix: str, base_load: float, factor: float, base_s: float, burst_s: float,
              after_s: float) -> dict[str, Any]:
    """The burst question for one seed in virtual time (see the module docstring)."""
    replicas, seqs = SIM_FLEETS[fleet]
    cap = capacity_rps(replicas, seqs)
    burst_mix, base_mix = SIM_MIXES[mix]
    segments: Segments = [(0.0, base_s, base_load * cap, base_mix), (base_s, burst_s, factor * cap, burst_mix),
                (base_s, burst_s, base_load * cap, base_mix), (base_s + burst_s, after_s, base_load * cap, base_mix)]
    # As the real run's soak before its burst: an overload teaches the gateway its replicas'
    # limits, then the mixed load until the backlog it left is gone (Relax's waits out its minute).
    warmup: Segments = [(0.0, 20.0, 2 * cap, burst_mix), (20.0, 70.0, base_load * cap, base_mix)]
    sent = sim_sent(replicas, seqs, segments, warmup, seed)
    steady = sim_sent(replicas, seqs, segments, warmup, seed, skip=frozenset({1}))  # the same, no burst
    return {"seed": seed, "fleet": fleet, "mix": mix, "base_rps": round(base_load * cap, 2),
            "burst_rps": round(factor * cap, 2), "burst_s": burst_s,
            **burst_figures(sent, base_s, base_s + burst_s, base_s + burst_s + after_s, steady)}


def replayed(seed: int, base_load: float, factor: float, base_s: float, burst_s: float,
             after_s: float) -> dict[str, Any]:
    """The real run's burst question for ``seed`` (``real_schedule``) on its fleet in virtual time,
    and the same schedule without the burst's requests for the steady share."""
    replicas, seqs = SIM_FLEETS["2xL4"]
    cap = capacity_rps(replicas, seqs)
    plan, started, ended = real_schedule(seed, base_load * cap, factor * cap, base_s, burst_s, after_s)
    warmup: Segments = [(0.0, 20.0, 2 * cap, MIX), (20.0, 70.0, base_load * cap, BASE_MIX)]
    first: Segments = [(0.0, base_s, base_load * cap, BASE_MIX)]
    sent = sim_sent(replicas, seqs, first, warmup, seed, schedule=[(t, tier) for t, tier, _ in plan])
    steady = sim_sent(replicas, seqs, first, warmup, seed, schedule=[(t, tier) for t, tier, b in plan if not b])
    return {"seed": seed, "fleet": "2xL4", "schedule": "real", "base_rps": round(base_load * cap, 2),
            "burst_rps": round(factor * cap, 2), "burst_s": burst_s,
            **burst_figures(sent, started, ended, ended + after_s, steady)}

