"""The gateway's in-process state, built once from the config: tenants by key hash, one L1
``Admission`` per pool, one L2 ``Picker``, model → pool, and the hot switches.

With ``--workers N`` each worker process holds its own copy (its own queues, counts, switches
and scraped loads); see docs/gateway.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from dataclasses import dataclass, field

from turbogate.config import GatewayConfig
from turbogate.httpclient import UpstreamPool
from turbogate.sched import (
    TIERS,
    Admission,
    Picker,
    PickerConfig,
    Replica,
    TenantPolicy,
    Tier,
    TierPolicy,
    resolve_tier,
)


@dataclass(slots=True, eq=False)
class TenantRt:
    name: str
    allowed: frozenset[Tier]
    default_tier: Tier
    turbo_enabled: bool = True
    label: str = ""


@dataclass(slots=True, eq=False)
class ReplicaRt:
    """A replica's I/O side: where it lives and how to scrape it."""

    state: Replica
    url: str
    engine: str
    metrics_path: str
    health_path: str
    api_key_env: str | None = None
    client: UpstreamPool | None = None  # keep-alive pool, set at startup


@dataclass(slots=True, eq=False)
class PoolRt:
    name: str
    models: tuple[str, ...]
    admission: Admission
    replicas: dict[str, ReplicaRt]
    priority_field: bool
    scale_out: bool = False


@dataclass(slots=True, eq=False)
class Runtime:
    config: GatewayConfig
    tenants_by_hash: dict[str, TenantRt]
    tenants: dict[str, TenantRt]
    pools: dict[str, PoolRt]
    pool_of_model: dict[str, PoolRt]
    picker: Picker
    policies: dict[Tier, TierPolicy]
    enabled: set[Tier] = field(default_factory=lambda: set(TIERS))
    admin_hash: str | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def tenant_for_key(self, key: bytes) -> TenantRt | None:
        return self.tenants_by_hash.get(hashlib.sha256(key).hexdigest())

    def is_admin(self, token: bytes) -> bool:
        if self.admin_hash is None:
            return False
        return hmac.compare_digest(hashlib.sha256(token).hexdigest(), self.admin_hash)

    def served_tier(self, tenant: TenantRt, asked: Tier) -> Tier:
        enabled = set(self.enabled)
        if not tenant.turbo_enabled:
            enabled.discard(Tier.TURBO)
        return resolve_tier(asked, tenant.allowed, frozenset(enabled))

    def set_enabled(self, tier: Tier, on: bool) -> None:
        if on:
            self.enabled.add(tier)
        else:
            self.enabled.discard(tier)
        for pool in self.pools.values():  # no headroom to keep for a tier nobody can get
            pool.admission.holdback = Tier.TURBO in self.enabled


def build_runtime(config: GatewayConfig) -> Runtime:
    policies = {
        Tier(name): TierPolicy(
            weight=t.weight,
            capacity_share=t.capacity_share,
            max_utilization=t.max_utilization,
            queue_bound=t.queue_bound,
            queue_budget_s=t.queue_budget_s,
            deadline_s=t.deadline_s,
        )
        for name, t in config.tiers.items()
    }
    tenant_policies = {t.name: TenantPolicy(weight=t.weight, max_in_flight=t.max_in_flight) for t in config.tenants}
    tenants: dict[str, TenantRt] = {}
    by_hash: dict[str, TenantRt] = {}
    for t in config.tenants:
        tenant = TenantRt(t.name, frozenset(Tier(x) for x in t.tiers), Tier(t.default_tier), label=t.name)
        tenants[t.name] = tenant
        for digest in t.key_sha256:
            by_hash[digest] = tenant
    bands = config.bands
    picker = Picker(
        PickerConfig(
            light_kv=bands.light_kv,
            saturated_kv=bands.saturated_kv,
            light_queue_s=bands.light_queue_ms / 1000,
            saturated_queue_s=bands.saturated_queue_ms / 1000,
            stale_after_s=config.scrape.stale_after_s,
            eject_after_failures=config.health.eject_after_failures,
            probe_backoff_s=config.health.probe_backoff_s,
            probe_backoff_max_s=config.health.probe_backoff_max_s,
            scale_out_after_s=bands.scale_out_after_s,
        )
    )
    pools: dict[str, PoolRt] = {}
    by_model: dict[str, PoolRt] = {}
    tenant_counts: dict[str, int] = {}  # shared: a tenant's max_in_flight spans every pool
    for p in config.pools:
        replicas: dict[str, ReplicaRt] = {}
        for i, r in enumerate(p.replicas):
            rid = r.name or r.url
            if rid in replicas:
                rid = f"{rid}#{i}"
            state = picker.add(Replica(id=rid, pool=p.name, max_concurrency=r.max_concurrency,
                                       scraped=r.engine != "openai"))
            replicas[rid] = ReplicaRt(state, r.url, r.engine, r.metrics_path, r.health_path, r.api_key_env)
        admission = Admission(policies, tenant_policies, aging_s=config.aging_s, tenant_counts=tenant_counts)
        pool = PoolRt(p.name, tuple(p.models), admission, replicas, p.scheduling_policy == "priority")
        pools[p.name] = pool
        for m in p.models:
            by_model[m] = pool
    rt = Runtime(
        config=config,
        tenants_by_hash=by_hash,
        tenants=tenants,
        pools=pools,
        pool_of_model=by_model,
        picker=picker,
        policies=policies,
        admin_hash=config.admin.token_sha256,
    )
    for name, tier_cfg in config.tiers.items():
        if not tier_cfg.enabled and name != "standard":
            rt.set_enabled(Tier(name), False)
    return rt


def pump(pool: PoolRt, picker: Picker, now: float, slots: int | None = None) -> None:
    """Dispatch every queued ticket L1 lets go now, waking the handler that waits on each."""
    admission = pool.admission
    if admission.queued == 0:
        return
    if slots is None:
        slots = picker.slots(pool.name, now)
    while True:
        ticket = admission.next_dispatch(now, slots)
        if ticket is None:
            return
        waiter = ticket.payload
        if isinstance(waiter, asyncio.Future) and not waiter.done():
            waiter.set_result(None)
