"""The flow's policy as plain values: what the config file says, minus everything that is I/O
(URLs, keys, paths).  ``turbogate.configpolicy.flow_policy`` builds it from a gateway config; the
simulator builds it from the same config plus a fleet file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from turbogate.sched.guard import GuardPolicy, KneeSource
from turbogate.sched.leases import LeasePolicy
from turbogate.sched.metering import MeteringPolicy
from turbogate.sched.regions import RegionPolicy
from turbogate.sched.replica import PickerConfig
from turbogate.sched.ticket import TierPolicy
from turbogate.sched.tiers import Tier

#: ``turbogate``: the full policy.  ``fifo``: the gateway queue ignores tiers (one FIFO, no
#: holdback), same L2.  ``round-robin`` / ``least-outstanding``: no gateway queue at all, every
#: request is dispatched at once (a plain proxy), and the engines queue.
Mode = Literal["turbogate", "fifo", "round-robin", "least-outstanding"]
MODES: tuple[str, ...] = ("turbogate", "fifo", "round-robin", "least-outstanding")


@dataclass(frozen=True, slots=True)
class TenantSpec:
    name: str
    allowed: frozenset[Tier] = frozenset({Tier.STANDARD, Tier.RELAX})
    default_tier: Tier = Tier.STANDARD
    weight: float = 1.0
    max_in_flight: int | None = None
    turbo_budget: float | None = None  # Turbo cost units per period (sched/metering.py); None: unlimited
    budget_period: str = "month"


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    id: str
    max_concurrency: int | None = None  # optional cap on the learned limit
    scraped: bool = True  # False: the engine exposes no load metrics (health checks instead)
    max_num_seqs: int | None = None  # the engine's batch limit, when configured (sched/concurrency.py)


@dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    models: tuple[str, ...]
    replicas: tuple[ReplicaSpec, ...]
    priority_field: bool = False  # engines run vLLM --scheduling-policy priority
    knee: KneeSource | None = None  # with a knee, the pool's Turbo grants pass a knee guard
    region: str | None = None  # where the pool runs (L3, sched/regions.py)
    turbo: bool = True  # Turbo-capable: False makes it a Standard pool, Turbo's fallback only


@dataclass(frozen=True, slots=True)
class FlowPolicy:
    tiers: Mapping[Tier, TierPolicy]
    tenants: tuple[TenantSpec, ...]
    pools: tuple[PoolSpec, ...]
    picker: PickerConfig = field(default_factory=PickerConfig)
    disabled: frozenset[Tier] = frozenset()  # tiers switched off at start (never Standard)
    mode: Mode = "turbogate"
    health_interval_s: float = 1.0  # how often replicas without metrics are health-checked
    default_max_tokens: int = 256  # a request's cost when it names no max_tokens
    max_cost_tokens: int = 131072  # bound on one request's fair-queue cost (tokens)
    guard: GuardPolicy = field(default_factory=GuardPolicy)
    metering: MeteringPolicy = field(default_factory=MeteringPolicy)
    leases: LeasePolicy = field(default_factory=LeasePolicy)  # Turbo leases (sched/leases.py)
    regions: RegionPolicy | None = None  # L3 settings; None: defaults, and no probes unless pools share a model
    warmup: bool = False  # warm a replica up when it joins or comes back (sched/warmup.py)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if Tier.STANDARD in self.disabled:
            raise ValueError("standard cannot be switched off: it is every other tier's fallback")
