"""Builders the pure-flow tests share: a one-pool policy and opening a request on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turbogate.sched import (
    Flow,
    FlowPolicy,
    FlowRequest,
    PickerConfig,
    PoolSpec,
    ReplicaSpec,
    TenantSpec,
    Tier,
    TierPolicy,
)


def one_pool(tiers: Mapping[Tier, TierPolicy], tenants: Sequence[str], *, replicas: int = 1, cap: int = 2,
             scraped: bool = True, **picker: Any) -> FlowPolicy:
    """Pool ``p`` serving model ``m`` on replicas ``r0`` … ``r{replicas-1}``, each capped at ``cap``
    (the picker's first limit too; ``picker`` sets the rest of its config); each tenant may ask
    every tier and gets Standard by default."""
    pool = PoolSpec("p", ("m",), tuple(ReplicaSpec(f"r{i}", cap, scraped=scraped) for i in range(replicas)), False)
    specs = tuple(TenantSpec(name, frozenset(Tier), Tier.STANDARD) for name in tenants)
    return FlowPolicy(tiers=dict(tiers), tenants=specs, pools=(pool,),
                      picker=PickerConfig(initial_limit=cap, **picker))


def open_request(flow: Flow, tenant: str, now: float, **fields: Any) -> FlowRequest:
    """``flow.open`` for model ``m``; the request must be admitted to the queue (not refused)."""
    req = flow.open(tenant=tenant, model="m", now=now, **fields)
    assert isinstance(req, FlowRequest), req
    return req
