"""The config's services beside routing: coalescing, L3 regions, warm-up, metering and its store,
L4 jobs and Turbo leases (defaults read from the core, never written twice)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from turbogate.config_base import ConfigModel, RegionName
from turbogate.sched.coalesce import DEFAULT_IGNORED_FIELDS, CoalescePolicy
from turbogate.sched.jobgraph import JobLimits
from turbogate.sched.leases import LeasePolicy
from turbogate.sched.regions import RegionPolicy

_COALESCE = CoalescePolicy()
_JOBS = JobLimits()
_LEASE = LeasePolicy()
_REGIONS = RegionPolicy()


class CoalesceConfig(ConfigModel):
    """Identical deterministic requests sharing one upstream call (sched/coalesce.py, docs/gateway.md)."""

    routes: list[Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]] = Field(
        [], description="routes on which coalescing is on (off everywhere by default)")
    window_s: float = Field(_COALESCE.window_s, gt=0,
                            description="a request joins a group if it comes within this long of its last arrival")
    max_requests: int = Field(_COALESCE.max_requests, ge=2, description="most requests sharing one call")
    max_span_s: float = Field(_COALESCE.max_span_s, gt=0,
                              description="cap on the sliding window: a group takes no one this long after its first")
    ignore_fields: list[str] = Field(list(DEFAULT_IGNORED_FIELDS),
                                     description="top-level body fields that do not change the answer (left out "
                                     "of the key)")

    @model_validator(mode="after")
    def _window_inside_span(self) -> CoalesceConfig:
        if self.window_s > self.max_span_s:
            raise ValueError("window_s must not exceed max_span_s")
        return self


class RegionsConfig(ConfigModel):
    """L3 region arbitration (sched/regions.py; docs/gateway.md)."""

    client_header: str = Field("X-Client-Region", pattern=r"^[A-Za-z0-9-]{1,64}$", description="request header "
                               "that names the client's region, or a CDN's country header (e.g. cf-ipcountry)")
    aliases: dict[str, RegionName] = Field(
        {}, description="header value or GeoIP country code → region, e.g. {DE: eu, US: us}")
    geoip_db: str | None = Field(
        None, description="a MaxMind Country/City .mmdb: the client address's country when the header is absent "
        "(needs the 'geoip' extra)")
    default_region: RegionName | Literal[""] = Field("", description="a client whose region is unknown")
    rtt_ms: dict[RegionName, dict[RegionName, float]] = Field(
        {}, description="client region → pool region → round trip in ms (the client's leg, added to what the "
        "gateway measures)")
    ewma_alpha: float = Field(_REGIONS.alpha, gt=0, le=1, description="weight of a new latency sample")
    sticky_s: float = Field(_REGIONS.sticky_s, ge=0, description="a session (tenant + X-Session-Id) keeps its pool "
                            "this long after its last request, while the pool is usable")
    max_sessions: int = Field(_REGIONS.max_sessions, ge=1)
    probe_interval_s: float = Field(_REGIONS.probe_interval_s, gt=0, description="round-trip probe of each pool")


class WarmupConfig(ConfigModel):
    """A warm-up request to each replica when it joins or comes back (sched/warmup.py)."""

    enabled: bool = Field(False, description="off by default: each warm-up is a real (one-token) inference call")
    path: Literal["/v1/chat/completions", "/v1/completions"] = "/v1/chat/completions"
    prompt: str = Field("Hello", min_length=1)
    max_tokens: int = Field(1, ge=1, le=64)
    timeout_s: float = Field(30.0, gt=0)


class MeteringConfig(ConfigModel):
    """What a request costs (docs/metering.md)."""

    turbo_cost_multiple: float = Field(2.0, gt=0, description="a Turbo token costs this many Standard tokens")
    relax_cost_multiple: float = Field(1.0, gt=0, description="a Relax token costs this many Standard tokens")


class StoreConfig(ConfigModel):
    """Where usage, budgets, switches and global tenant limits live (docs/metering.md)."""

    kind: Literal["memory", "sqlite", "redis"] = Field(
        "sqlite", description="memory: this process only (tests); sqlite: one host, shared by --workers; redis: "
        "several hosts")
    path: str | None = Field(None, description="SQLite file (default: <config file>.state.sqlite3 beside the config)")
    url: str = Field("redis://127.0.0.1:6379/0", description="Redis URL (kind: redis)")
    prefix: str = Field("turbogate", description="Redis key prefix, so gateways of two deployments can share one")
    buffer_dir: str | None = Field(
        None, description="where usage records wait while the store is unreachable (default: beside the config)")
    sync_interval_s: float = Field(0.5, gt=0, le=60, description="how often switches and budgets are read back")
    retry_interval_s: float = Field(1.0, gt=0, le=60, description="how often an unreachable store is retried, and "
                                    "at most how often its failure is logged")
    timeout_s: float = Field(1.0, gt=0, description="one store call's timeout before the store counts as down")


class JobsConfig(ConfigModel):
    """L4 job graphs (``POST /v1/jobs``, sched/jobgraph.py): how large a job may be, how long
    this process remembers it."""

    max_depth: int = Field(_JOBS.max_depth, ge=0, description="longest chain of dependencies (edges)")
    max_fan_out: int = Field(_JOBS.max_fan_out, ge=1, description="most steps depending directly on one step")
    max_steps: int = Field(_JOBS.max_steps, ge=1, description="most steps in one job")
    keep_s: float = Field(3600.0, gt=0, description="a finished job stays readable (GET) this long")
    max_jobs: int = Field(1000, ge=1, description="jobs remembered by one worker; when full, the oldest "
                          "finished goes, and with none finished a new job gets 429")


class LeasesConfig(ConfigModel):
    """Turbo leases (``POST /v1/turbo/leases``, sched/leases.py)."""

    duration_s: float = Field(_LEASE.duration_s, gt=0, description="a new lease's term")
    renew_below_s: float = Field(_LEASE.renew_below_s, gt=0, description="a heartbeat renews the term when "
                                 "less than this remains")
    renew_by_s: float = Field(_LEASE.renew_by_s, gt=0, description="how much a renewal adds to the term")
    warn_after_s: float = Field(_LEASE.warn_after_s, gt=0, description="no heartbeat this long: state warn")
    expire_after_s: float = Field(_LEASE.expire_after_s, gt=0, description="no heartbeat this long: expired "
                                  "(requests with the lease are then served Standard)")
    ping_interval_s: float = Field(_LEASE.ping_interval_s, gt=0, description="heartbeat interval told to clients")
    max_per_tenant: int = Field(_LEASE.max_per_tenant, ge=1, description="live leases one tenant may hold")
    keep_expired_s: float = Field(_LEASE.keep_expired_s, gt=0, description="how long an expired lease is "
                                  "remembered (requests naming it are told it expired)")

    @model_validator(mode="after")
    def _ordered(self) -> LeasesConfig:
        if not self.warn_after_s < self.expire_after_s:
            raise ValueError("need warn_after_s < expire_after_s")
        return self
