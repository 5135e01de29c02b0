"""The pure core's policies from a gateway config: the one place config values become
``sched/`` policy, for the gateway and the simulator alike (``turbogate.config`` holds the
models and their validation; this module turns them into ``FlowPolicy``, ``RegionPolicy``,
``KneeSource``, ``CoalescePolicy``, ``JobLimits`` and ``LeasePolicy``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from turbogate.config import CoalesceConfig, GatewayConfig, JobsConfig, LeasesConfig, Pool, RegionsConfig, Replica
from turbogate.errors import ConfigError, TurbogateError
from turbogate.sched.admission import TierPolicy
from turbogate.sched.coalesce import CoalescePolicy
from turbogate.sched.guard import GuardPolicy, KneeSource
from turbogate.sched.jobgraph import JobLimits
from turbogate.sched.leases import LeasePolicy
from turbogate.sched.metering import LimitPolicy, MeteringPolicy
from turbogate.sched.picker import PickerConfig
from turbogate.sched.policy import FlowPolicy, Mode, PoolSpec, ReplicaSpec, TenantSpec
from turbogate.sched.regions import RegionPolicy
from turbogate.sched.tiers import Tier


def replica_ids(pool: Pool) -> list[tuple[str, Replica]]:
    """Each replica of ``pool`` with the id the flow and the metrics know it by (its name, else
    its URL; a repeated one gets ``#index``)."""
    out: list[tuple[str, Replica]] = []
    seen: set[str] = set()
    for i, r in enumerate(pool.replicas):
        rid = r.name or r.url
        if rid in seen:
            rid = f"{rid}#{i}"
        seen.add(rid)
        out.append((rid, r))
    return out


def flow_policy(config: GatewayConfig, pools: Sequence[PoolSpec] | None = None, mode: Mode = "turbogate") -> FlowPolicy:
    """The pure core's policy from a gateway config — the one place config values become
    policy, for the gateway and the simulator alike.  ``pools`` replaces the config's own
    (the simulator's fleet file); ``mode`` selects a baseline policy (sched/policy.py)."""
    tiers = {
        Tier(name): TierPolicy(
            capacity_share=t.capacity_share,
            max_utilization=t.max_utilization,
            queue_bound=t.queue_bound,
            queue_budget_s=t.queue_budget_s,
            deadline_s=t.deadline_s,
            min_share=t.min_share,
            ttft_slo_s=t.ttft_slo_s,
        )
        for name, t in config.tiers.items()
    }
    tenants = tuple(
        TenantSpec(t.name, frozenset(Tier(x) for x in t.tiers), Tier(t.default_tier), t.weight, t.max_in_flight,
                   t.turbo_budget_units, t.budget_period)
        for t in config.tenants
    )
    if pools is None:
        pools = [
            PoolSpec(p.name, tuple(p.models),
                     tuple(ReplicaSpec(rid, r.max_concurrency, r.scraped, r.max_num_seqs) for rid, r in replica_ids(p)),
                     p.scheduling_policy == "priority", knee_source(p, config.knee_guard.online), region=p.region,
                     turbo=p.turbo)
            for p in config.pools
        ]
    bands, cc = config.bands, config.concurrency
    picker = PickerConfig(
        light_kv=bands.light_kv,
        saturated_kv=bands.saturated_kv,
        light_queue_s=bands.light_queue_ms / 1000,
        saturated_queue_s=bands.saturated_queue_ms / 1000,
        stale_after_s=config.scrape.stale_after_s,
        eject_after_failures=config.health.eject_after_failures,
        probe_backoff_s=config.health.probe_backoff_s,
        probe_backoff_max_s=config.health.probe_backoff_max_s,
        scale_out_after_s=bands.scale_out_after_s,
        phase_weight=bands.phase_weight,
        initial_limit=cc.initial,
        queue_tolerance=cc.queue_tolerance,
        grow_every_scrapes=cc.grow_every_scrapes,
        unscraped_limit=cc.unscraped_limit,
    )
    disabled = frozenset(Tier(name) for name, t in config.tiers.items() if not t.enabled and name != "standard")
    g = config.knee_guard
    guard = GuardPolicy(enter_capped=g.enter_capped, leave_capped=g.leave_capped, enter_closed=g.enter_closed,
                        leave_closed=g.leave_closed, min_dwell_s=g.min_dwell_s, turbo_share=g.turbo_share,
                        rate_tau_s=g.window_s)
    return FlowPolicy(tiers=tiers, tenants=tenants, pools=tuple(pools), picker=picker, disabled=disabled, mode=mode,
                      health_interval_s=config.health.interval_s, guard=guard,
                      max_cost_tokens=config.limits.max_tokens, leases=lease_policy(config.leases),
                      regions=region_policy(config.regions), warmup=config.warmup.enabled,
                      metering=MeteringPolicy(config.metering.turbo_cost_multiple, config.metering.relax_cost_multiple))


def region_policy(regions: RegionsConfig | None) -> RegionPolicy | None:
    """L3's policy from the config's ``regions`` (None: no such section)."""
    if regions is None:
        return None
    return RegionPolicy(rtt_ms={c: dict(t) for c, t in regions.rtt_ms.items()}, default_region=regions.default_region,
                        alpha=regions.ewma_alpha, sticky_s=regions.sticky_s, max_sessions=regions.max_sessions,
                        probe_interval_s=regions.probe_interval_s)


def knee_source(pool: Pool, online: bool = False, replicas: int | None = None) -> KneeSource | None:
    """The pool's knee for its guard: a fixed value, a run folder's measured knee (the file is
    read here, at the edge), the planner's, or one learnt online (also for a pool with no knee
    when ``online``, i.e. ``knee_guard.online``).  ``replicas``: the pool's size for the planner
    when it is not the config's (the simulator's fleet).  ``ConfigError``: no knee to give."""
    if pool.knee_rps is not None:
        return KneeSource("config", pool.knee_rps)
    if pool.knee_from == "online" or (pool.knee_from is None and online):
        return KneeSource("online", 0.0, "learnt from Turbo queue time and TTFT, engine load, achieved rate")
    if pool.knee_from is None:
        return None
    if pool.knee_from == "plan" and pool.plan is not None:
        from turbogate.plan.knee import PlannedPool, planned_knee

        pl = pool.plan
        try:
            planned, detail = planned_knee(PlannedPool(
                pl.gpu, pl.model or pool.models[0], replicas or len(pool.replicas), tp=pl.tp, dtype=pl.dtype,
                prompt_tokens=pl.prompt_tokens, output_tokens=pl.output_tokens, max_num_seqs=pl.max_num_seqs,
                knee_factor=pl.knee_factor))
        except (ValueError, LookupError, TurbogateError) as exc:
            raise ConfigError(f"pools.{pool.name}.plan: {exc}") from None
        return KneeSource("planner", planned, detail)
    from turbogate.results import load_run

    try:
        run = load_run(Path(pool.knee_from), with_requests=False, with_samples=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"pools.{pool.name}.knee_from: cannot read {pool.knee_from} ({exc})") from None
    knee = run.summary.knee()
    if knee is None:
        raise ConfigError(f"pools.{pool.name}.knee_from: {pool.knee_from} found no knee (run past it, or give "
                          "knee_rps)")
    return KneeSource("run", knee, pool.knee_from)


# ---- the services' policies (coalescing, L4 jobs, Turbo leases) ----------------------------------


def coalesce_policy(config: CoalesceConfig) -> CoalescePolicy:
    """Coalescing's policy from the config's ``coalesce`` section."""
    return CoalescePolicy(window_s=config.window_s, max_requests=config.max_requests, max_span_s=config.max_span_s,
                          ignored_fields=frozenset(config.ignore_fields))


def job_limits(config: JobsConfig) -> JobLimits:
    """How large an L4 job may be, from the config's ``jobs`` section."""
    return JobLimits(config.max_depth, config.max_fan_out, config.max_steps)


def lease_policy(config: LeasesConfig) -> LeasePolicy:
    """Turbo leases' policy from the config's ``leases`` section."""
    return LeasePolicy(config.duration_s, config.renew_below_s, config.renew_by_s, config.warn_after_s,
                       config.expire_after_s, config.ping_interval_s, config.max_per_tenant, config.keep_expired_s)


# ---- metering: each tenant's global limits ---------------------------------------------------------


def tenant_limits(config: GatewayConfig) -> dict[str, LimitPolicy]:
    """Each tenant's global limits (in flight, requests and tokens per minute), for the tenants
    that set any: the store counts them across every gateway (sched/metering.py's rule)."""
    return {t.name: lim for t in config.tenants
            if (lim := LimitPolicy(t.max_in_flight, t.requests_per_minute, t.tokens_per_minute)).any}


def limit_hold_s(config: GatewayConfig) -> float:
    """How long a limit place is held at most: the longest a request can live (queue budget and
    deadline of its tier), so a crashed gateway's places are freed after it."""
    return max(t.deadline_s + t.queue_budget_s for t in config.tiers.values())
