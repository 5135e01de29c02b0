"""The gateway's in-process state, built once from the config: the pure ``Flow`` (every rule),
tenants by key hash, and each replica's I/O side (URL, paths, keep-alive pool).

With ``--workers N`` each worker process holds its own copy (its own queues, counts, switches
and scraped loads); see docs/gateway.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from dataclasses import dataclass, field

from turbogate.config import GatewayConfig
from turbogate.configpolicy import flow_policy, replica_ids
from turbogate.httpclient import UpstreamPool
from turbogate.sched import Flow, Replica, Tier


@dataclass(slots=True, frozen=True)
class TenantRt:
    name: str
    label: str  # the tenant's name as metrics show it


@dataclass(slots=True, eq=False)
class ReplicaIO:
    """A replica's I/O side: where it lives and how to scrape and probe it."""

    state: Replica
    url: str
    engine: str
    metrics_path: str
    health_path: str
    api_key_env: str | None = None
    client: UpstreamPool | None = None  # keep-alive pool, set at startup
    tier_clients: dict[Tier, UpstreamPool] = field(default_factory=dict)  # DSCP-marked pools (gateway/marking.py)

    def client_for(self, tier: Tier) -> UpstreamPool | None:
        """The pool a request served at ``tier`` goes through: its tier's marked one, or the plain one."""
        return self.tier_clients.get(tier, self.client)

    def clients(self) -> list[UpstreamPool]:
        """Every distinct pool of this replica (to wrap or close them all)."""
        pools = [] if self.client is None else [self.client]
        for pool in self.tier_clients.values():
            if pool not in pools:
                pools.append(pool)
        return pools


_KNOWN_KEYS_MAX = 10_000


@dataclass(slots=True, eq=False)
class Runtime:
    config: GatewayConfig
    flow: Flow
    tenants_by_hash: dict[str, TenantRt]
    replicas: dict[str, ReplicaIO]
    admin_hash: str | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    #: keys already matched to a tenant, so the usual request costs a lookup, not a sha256.  Only
    #: keys that matched are kept (the tenants are fixed for the process's life), so unknown keys
    #: cannot grow it; it holds what every request's buffer held anyway, and is never logged.
    _known_keys: dict[bytes, TenantRt] = field(default_factory=dict, repr=False)

    def tenant_for_auth(self, auth: bytes | None) -> TenantRt | None:
        """The tenant of an ``Authorization`` header's value (None: absent, not a bearer key, unknown)."""
        if not auth or auth[:7].lower() != b"bearer ":
            return None
        return self.tenant_for_key(auth[7:].strip())

    def tenant_for_key(self, key: bytes) -> TenantRt | None:
        tenant = self._known_keys.get(key)
        if tenant is None:
            tenant = self.tenants_by_hash.get(hashlib.sha256(key).hexdigest())
            if tenant is not None and len(self._known_keys) < _KNOWN_KEYS_MAX:
                self._known_keys[key] = tenant
        return tenant

    def is_admin(self, token: bytes) -> bool:
        if self.admin_hash is None:
            return False
        return hmac.compare_digest(hashlib.sha256(token).hexdigest(), self.admin_hash)


def build_runtime(config: GatewayConfig) -> Runtime:
    flow = Flow(flow_policy(config))
    by_hash: dict[str, TenantRt] = {}
    for t in config.tenants:
        tenant = TenantRt(t.name, t.name)
        for digest in t.key_sha256:
            by_hash[digest] = tenant
    replicas: dict[str, ReplicaIO] = {}
    for p in config.pools:
        for rid, r in replica_ids(p):
            replicas[rid] = ReplicaIO(flow.picker.get(rid), r.url, r.engine, r.metrics_path or "/metrics",
                                      r.health_path or "/health",
                                      r.api_key_env)
    return Runtime(config=config, flow=flow, tenants_by_hash=by_hash, replicas=replicas,
                   admin_hash=config.admin.token_sha256)
