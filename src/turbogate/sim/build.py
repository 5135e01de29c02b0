"""Assemble a simulation from the gateway's own config, a fleet file and the load options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

from turbogate.bench.options import LoadOptions
from turbogate.config import GatewayConfig, hash_key
from turbogate.configpolicy import flow_policy, knee_source, region_policy
from turbogate.engine.profiled import profile_config
from turbogate.errors import CatalogError, ConfigError
from turbogate.sched.flow import Flow
from turbogate.sched.policy import MODES, Mode, PoolSpec, ReplicaSpec
from turbogate.sched.regions import RegionPolicy
from turbogate.sim.baselines import PHASE_AWARE, phase_aware
from turbogate.sim.core import Simulation
from turbogate.sim.fleet import Fleet
from turbogate.sim.regions import sim_regions
from turbogate.sim.replica import SimReplica, group_deployment
from turbogate.sim.requests import RequestSource, SimRequest

POLICIES: tuple[str, ...] = (*MODES, PHASE_AWARE)  # the Flow's baselines (sched/policy.py), and phase-aware L2


@dataclass(frozen=True)
class SimConfig:
    """Everything one simulated run needs (picklable: it travels to sweep workers)."""

    gateway: GatewayConfig
    fleet: Fleet
    load: LoadOptions
    model: str | None = None  # default: the first model of the first fleet pool
    policy: str = "turbogate"
    chat: bool = True
    stream: bool = True
    ignore_eos: bool = True
    min_tokens: bool = False
    api_keys: tuple[str, ...] = ()
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # recorded in summary.json's config
    #: Seconds of unrecorded traffic before the run, at the run's starting rate: the gateway's
    #: learned state (concurrency limits, service times, rates) is warm when measuring starts.
    warmup_s: float = 0.0

    def describe(self) -> dict[str, Any]:
        ld = self.load
        return {
            "policy": self.policy, "model": self.resolved_model(), "route": "chat" if self.chat else "completions",
            "stream": self.stream, "ignore_eos": self.ignore_eos, "min_tokens": self.min_tokens,
            "api_keys": len(self.api_keys), "shape": ld.shape, "qps": ld.qps, "qps_start": ld.qps_start,
            "qps_end": ld.qps_end, "steps": ld.steps, "duration_s": ld.duration_s, "arrivals": ld.arrivals.kind,
            "burstiness": ld.arrivals.burstiness, "random_seed": ld.random_seed,
            "prompt_tokens": asdict(ld.workload.prompt_tokens), "output_tokens": asdict(ld.workload.output_tokens),
            "tiers": dict(ld.workload.tiers.weights), "per_request_seed": ld.workload.per_request_seed,
            "dataset_prompts": len(ld.workload.dataset), "replicas": self.fleet.num_replicas,
            "warmup_s": self.warmup_s,
            "fleet": self.fleet.model_dump(mode="json"), "label": self.label, **self.extra,
        }

    def resolved_model(self) -> str:
        if self.model:
            return self.model
        first = self.fleet.pools[0].name
        return next(p.models[0] for p in self.gateway.pools if p.name == first)


def _tenants(cfg: GatewayConfig, api_keys: tuple[str, ...]) -> list[str]:
    if not api_keys:
        return [cfg.tenants[0].name]
    by_hash = {h: t.name for t in cfg.tenants for h in t.key_sha256}
    out = []
    for i, key in enumerate(api_keys):
        name = by_hash.get(hash_key(key))
        if name is None:
            raise ConfigError(f"--api-key #{i + 1} matches no tenant of the gateway config")
        out.append(name)
    return out


def build_replicas(sc: SimConfig) -> tuple[list[SimReplica], list[PoolSpec]]:
    cfg, fleet = sc.gateway, sc.fleet
    pools = {p.name: p for p in cfg.pools}
    reps: list[SimReplica] = []
    specs: list[PoolSpec] = []
    for i, fp in enumerate(fleet.pools):
        gp = pools.get(fp.name)
        if gp is None:
            raise ConfigError(f"fleet pools.{i}.name: {fp.name!r} is not a pool of the gateway config "
                              f"({', '.join(pools)})")
        delay = fleet.network.gateway_replica_ms / 1000 + fp.rtt_ms / 2000
        mine: list[ReplicaSpec] = []
        for j, g in enumerate(fp.replicas):
            try:
                dep = group_deployment(g)
                ecfg = profile_config(g.engine_profile, g.max_num_seqs, g.max_num_batched_tokens,
                                      policy=g.scheduling_policy or gp.scheduling_policy,
                                      num_gpu_blocks=g.num_gpu_blocks)
            except (ValueError, LookupError, CatalogError) as exc:
                raise ConfigError(f"fleet pools.{i}.replicas.{j}: {exc}") from None
            for _ in range(g.count):
                rid = f"{fp.name}/{len(mine)}"
                reps.append(SimReplica(rid, fp.name, dep, ecfg, delay_s=delay))
                mine.append(ReplicaSpec(id=rid, max_concurrency=g.max_concurrency or gp.replicas[0].max_concurrency,
                                        scraped=True, max_num_seqs=gp.replicas[0].max_num_seqs))
        specs.append(PoolSpec(fp.name, models=tuple(gp.models), priority_field=gp.scheduling_policy == "priority",
                              replicas=tuple(mine),
                              knee=knee_source(gp, cfg.knee_guard.online, len(mine)),  # its knee guard, as served
                              region=fp.region or gp.region, turbo=gp.turbo))
    return reps, specs


def build_simulation(sc: SimConfig, progress: Callable[[float], None] | None = None) -> tuple[Simulation,
                                                                                              RequestSource]:
    if sc.policy not in POLICIES:
        raise ConfigError(f"--policy must be one of {', '.join(POLICIES)}, got {sc.policy!r}")
    reps, specs = build_replicas(sc)
    model = sc.resolved_model()
    if not any(model in s.models for s in specs):
        raise ConfigError(f"--model {model!r} is served by no pool of the fleet")
    policy = phase_aware(flow_policy(sc.gateway, pools=specs, mode="turbogate")) if sc.policy == PHASE_AWARE \
        else flow_policy(sc.gateway, pools=specs, mode=cast(Mode, sc.policy))
    fleet = sc.fleet
    regions = sim_regions(fleet, {s.name: s.region for s in specs})
    if regions is not None:  # L3 ranks pools with the fleet's RTT table (the gateway's config holds its own)
        base = region_policy(sc.gateway.regions) or RegionPolicy()
        policy = replace(policy, regions=replace(base, rtt_ms=fleet.region_rtt_ms))
    flow = Flow(policy)
    source = RequestSource(sc.load, chat=sc.chat, ignore_eos=sc.ignore_eos, min_tokens=sc.min_tokens)
    warmup = warmup_requests(sc, source.rate_at(0.0)) if sc.warmup_s > 0 else []
    outages = [(o.down_at_s, o.replica, False) for o in fleet.failures if o.kind == "crash"]
    outages += [(o.up_at_s, o.replica, True) for o in fleet.failures if o.up_at_s is not None]
    freezes = [(o.down_at_s, o.replica) for o in fleet.failures if o.kind == "freeze"]
    sim = Simulation(flow, reps, source, model=model, tenants=_tenants(sc.gateway, sc.api_keys), stream=sc.stream,
                     c2g_s=fleet.network.client_gateway_ms / 1000,
                     scrape_interval_s=fleet.scrape.interval_s or sc.gateway.scrape.interval_s,
                     staleness_s=fleet.scrape.staleness_s, outages=outages, freezes=freezes, progress=progress,
                     regions=regions, warmup=warmup, warmup_s=sc.warmup_s)
    return sim, source


#: Added to the run's seed for the warm-up's draws: warm-up requests are new ones, and the
#: measured requests stay bench's (the same seed gives the same requests with or without warm-up).
WARMUP_SEED_OFFSET = 0x5EED


def warmup_requests(sc: SimConfig, rate: float) -> list[SimRequest]:
    """``sc.warmup_s`` seconds of the run's workload at ``rate`` (its starting rate), ids < 0."""
    ld = sc.load
    warm = replace(ld, shape="constant", qps=rate, qps_start=rate, qps_end=rate, steps=1, duration_s=sc.warmup_s,
                   random_seed=ld.random_seed + WARMUP_SEED_OFFSET)
    src = RequestSource(warm, chat=sc.chat, ignore_eos=sc.ignore_eos, min_tokens=sc.min_tokens)
    return [r._replace(id=-1 - r.id) for r in src]
