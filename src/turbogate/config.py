"""Gateway configuration: pydantic models, YAML loading, key hashing and the JSON schema.

API keys and the admin token are stored as sha256 hex digests, never in clear; produce one
with ``turbogate serve --hash-key KEY``.  ``python -m turbogate.config`` prints the JSON
schema (kept in ``schemas/gateway.schema.json``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from turbogate.dscp import parse_dscp
from turbogate.errors import ConfigError
from turbogate.sched.coalesce import DEFAULT_IGNORED_FIELDS, CoalescePolicy
from turbogate.sched.guard import GuardPolicy
from turbogate.sched.jobgraph import JobLimits
from turbogate.sched.leases import LeasePolicy
from turbogate.sched.picker import PickerConfig
from turbogate.sched.regions import RegionPolicy
from turbogate.validation import describe_validation_error

EngineKind = Literal["vllm", "sglang", "tgi", "llamacpp", "openai", "emulator"]
# Kinds whose server has no load metrics by default (docs/engines.md): L2 counts its own in-flight requests.
UNSCRAPED_KINDS: frozenset[str] = frozenset({"openai", "llamacpp"})
TierName = Literal["turbo", "standard", "relax"]
#: The pure core's defaults: the config's defaults are read from here, never written twice.
_PICK = PickerConfig()
_GUARD = GuardPolicy()
_COALESCE = CoalescePolicy()
_JOBS = JobLimits()
_LEASE = LeasePolicy()
_REGIONS = RegionPolicy()
RegionName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,32}$", description="a region name")]

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="sha256 hex digest (lower case)")]


def hash_key(key: str) -> str:
    """The sha256 hex digest under which ``key`` is stored in the config."""
    return hashlib.sha256(key.encode()).hexdigest()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Listen(_Model):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    idle_poll_max_us: int = Field(
        200, ge=0, le=100_000,
        description="the cap of the adaptive poll window (µs; 0: off): after the event loop goes idle it keeps "
                    "polling for a window learnt as the kernel's cpuidle-haltpoll governor learns its own, open "
                    "only while events come back within the cap (a fast engine, a client's next request), shut "
                    "while they do not (an LLM's answers take milliseconds), so a wake-up is saved where one "
                    "would cost more than the poll (gateway/busypoll.py)")
    busy_poll_us: int = Field(
        0, ge=0, le=100_000,
        description="a fixed poll window instead of the adaptive one (µs; 0, the default: adaptive, "
                    "idle_poll_max_us): after the loop goes idle, keep polling this long every time "
                    "(gateway/busypoll.py)")


_REMOVED_TIER_KEYS = {
    "weight": "tiers now take strict precedence (Turbo, then Standard, then Relax); give a lower tier a "
              "guaranteed share of dispatches with min_share instead (docs/gateway.md)",
}


class TierConfig(_Model):
    """One tier's policy (see docs/gateway.md for how L1 uses each value)."""

    min_share: float = Field(
        0.0, ge=0, lt=1, description="least share of dispatches this tier gets while it has requests queued, "
        "however busy the tiers above it are (starvation protection)")
    capacity_share: float = Field(1.0, gt=0, le=1, description="most of a pool's slots this tier may hold")
    max_utilization: float = Field(
        1.0, gt=0, le=1, description="holdback: dispatch only while the pool's use is under this fraction"
    )
    queue_bound: int = Field(1024, ge=1, description="most requests waiting in this tier's queue (per pool)")
    ttft_slo_s: float | None = Field(
        None, gt=0, description="the tier's time-to-first-token objective (s): its queue budget by default, and a "
        "standing queue is then served newest first so that what is served meets it (controlled delay, "
        "sched/codel.py); for turbo, a request that would queue past it is served Standard at once")
    queue_budget_s: float = Field(30.0, gt=0, description="longest a request may wait before it is shed (503); "
                                  "default: ttft_slo_s when set, else 30")
    deadline_s: float = Field(300.0, gt=0, description="arrival to full answer (first byte for streams) → 504")
    enabled: bool = True
    dscp: int | str | None = Field(
        default=None, description="DSCP mark (0-63, or a name: EF, AF41, CS3, ...) of the upstream connections "
        "that serve this tier (IP_TOS); unset: unmarked")

    @field_validator("dscp", mode="before")
    @classmethod
    def _dscp(cls, v: Any) -> int | None:
        return None if v is None else parse_dscp(v)

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in _REMOVED_TIER_KEYS.items():
                if key in data:
                    raise ValueError(f"{key!r} was removed: {why}")
            if data.get("queue_budget_s") is None and data.get("ttft_slo_s") is not None:
                data = {**data, "queue_budget_s": data["ttft_slo_s"]}  # the queue budget follows the objective
        return data


def _default_tiers() -> dict[str, TierConfig]:
    return {
        # Turbo keeps a longer budget than its objective: what exceeds the objective is served
        # Standard at arrival (sched/turbo_supply.py), and one already queued is better late than refused.
        "turbo": TierConfig(min_share=0.0, capacity_share=1.0, max_utilization=1.0, queue_bound=256,
                            ttft_slo_s=1.0, queue_budget_s=5, deadline_s=120),
        "standard": TierConfig(min_share=0.2, capacity_share=0.9, max_utilization=0.85, queue_bound=1024,
                               ttft_slo_s=5.0, queue_budget_s=5.0, deadline_s=300),
        "relax": TierConfig(min_share=0.05, capacity_share=0.5, max_utilization=0.7, queue_bound=4096,
                            ttft_slo_s=60.0, queue_budget_s=60.0, deadline_s=600),
    }


class Tenant(_Model):
    name: str = Field(min_length=1)
    key_sha256: list[Sha256] = Field(min_length=1, description="sha256 of each API key of this tenant")
    tiers: list[TierName] = Field(["standard", "relax"], min_length=1)
    default_tier: TierName = "standard"
    weight: float = Field(1.0, gt=0, description="fair-share weight within a tier")
    max_in_flight: int | None = Field(None, ge=1, description="queued + running cap; over it → 429 (held across "
                                      "every gateway process sharing the store)")
    requests_per_minute: int | None = Field(None, ge=1, description="requests per wall-clock minute, across every "
                                            "gateway process sharing the store; over it → 429")
    tokens_per_minute: int | None = Field(None, ge=1, description="prompt + completion tokens per wall-clock minute, "
                                          "across the gateways; once reached → 429 until the minute ends")
    turbo_budget_units: float | None = Field(
        None, ge=0, description="Turbo cost units per budget period; once spent, Turbo requests are served Standard "
        "(X-Turbogate-Downgrade: turbo_budget_spent). The admin API can change it (docs/metering.md)")
    budget_period: Literal["hour", "day", "week", "month"] = "month"

    @field_validator("key_sha256", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _default_allowed(self) -> Tenant:
        if self.default_tier not in self.tiers:
            raise ValueError(f"default_tier {self.default_tier!r} is not among the tenant's tiers {self.tiers}")
        return self


class Replica(_Model):
    url: str = Field(pattern=r"^https?://", description="base URL of the engine (without /v1)")
    engine: EngineKind = "vllm"
    max_concurrency: int | None = Field(
        None, ge=1, description="optional cap on the requests in flight to this replica; the working limit is "
        "learned from the engine's running/waiting metrics (adaptive concurrency)")
    max_num_seqs: int | None = Field(
        None, ge=1, description="the engine's own batch limit (vLLM --max-num-seqs): the learned limit starts there "
        "instead of slow-starting, and never exceeds it, so a surge finds it already learnt (docs/gateway.md)")
    metrics_path: str | None = Field(
        None, description="Prometheus endpoint of the engine's load metrics; default /metrics, except for "
        "engine 'openai' and 'llamacpp' (llama_cpp.server has none; llama-server's needs --metrics): those are "
        "not scraped and L2 uses the gateway's own in-flight counts. Set it to scrape a llama-server --metrics")
    health_path: str | None = Field(
        None, description="health endpoint probed while ejected (and for unscraped replicas); default /health, "
        "/v1/models for engine 'llamacpp' (llama_cpp.server has no /health)")
    name: str | None = None
    api_key_env: str | None = Field(
        None, description="name of an environment variable holding the engine's API key (sent as a bearer token)"
    )

    @field_validator("url")
    @classmethod
    def _strip(cls, v: str) -> str:
        v = v.rstrip("/")
        return v[:-3] if v.endswith("/v1") else v

    @model_validator(mode="before")
    @classmethod
    def _engine_paths(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        engine = data.get("engine", "vllm")
        data = dict(data)
        if data.get("metrics_path") is None and engine not in UNSCRAPED_KINDS:
            data["metrics_path"] = "/metrics"
        if data.get("health_path") is None:
            data["health_path"] = "/v1/models" if engine == "llamacpp" else "/health"
        return data

    @property
    def scraped(self) -> bool:
        """Whether L2 reads this replica's load from its metrics (else from own in-flight counts)."""
        return self.metrics_path is not None and self.engine != "openai"


class PlanKnee(_Model):
    """The pool's hardware, model and request shape, for the planner's knee (``knee_from: plan``)."""

    gpu: str = Field(min_length=1, description="GPU name, as `turbogate plan gpus` lists them")
    model: str | None = Field(None, description="catalog model or config.json path (default: the pool's first model)")
    tp: int = Field(1, ge=1)
    dtype: str = "bf16"
    prompt_tokens: int = Field(512, ge=1)
    output_tokens: int = Field(256, ge=1)
    max_num_seqs: int = Field(256, ge=1)
    knee_factor: float = Field(2.0, gt=1, description="the knee: mean E2E reaches this × its unloaded value")


class Pool(_Model):
    name: str = Field(min_length=1)
    models: list[str] = Field(min_length=1, description="model names this pool serves")
    replicas: list[Replica] = Field(min_length=1)
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "fcfs", description="'priority' when the engines run vLLM --scheduling-policy priority: the tier is "
        "then passed as the request's priority field"
    )
    region: RegionName | None = Field(None, description="where the pool runs, for L3 region arbitration")
    turbo: bool = Field(True, description="Turbo-capable; false makes a Standard pool that serves Turbo requests "
                        "(as Standard, saying so) only while every Turbo-capable pool of the model is unhealthy")
    alt_svc: str | None = Field(None, pattern=r"^[\x20-\x7e]+$", description="Alt-Svc header value sent with "
                                "answers this pool served, e.g. 'h2=\"eu.api.example.com:443\"; ma=3600'")
    knee_rps: float | None = Field(
        None, gt=0, description="the pool's knee (offered req/s, all tiers): with one, a knee guard caps and then "
        "closes Turbo past it (docs/gateway.md)")
    knee_from: str | None = Field(
        None, description="where the knee comes from: a bench or sim run folder (its measured knee, tier 'all'), "
        "'plan' (the planner's knee for the pool's `plan` block) or 'online' (learnt from live signals)")
    plan: PlanKnee | None = Field(None, description="hardware, model and request shape for knee_from: plan")

    @model_validator(mode="after")
    def _one_knee(self) -> Pool:
        if self.knee_rps is not None and self.knee_from is not None:
            raise ValueError("give knee_rps or knee_from, not both")
        if self.knee_from == "plan" and self.plan is None:
            raise ValueError("knee_from: plan needs a plan block (gpu, prompt_tokens, output_tokens, ...)")
        return self


class KneeGuardConfig(_Model):
    """Thresholds of the knee guard, as offered load ÷ knee (sched/guard.py)."""

    enter_capped: float = Field(_GUARD.enter_capped, gt=0)
    leave_capped: float = Field(_GUARD.leave_capped, gt=0)
    enter_closed: float = Field(_GUARD.enter_closed, gt=0)
    leave_closed: float = Field(_GUARD.leave_closed, gt=0)
    min_dwell_s: float = Field(_GUARD.min_dwell_s, ge=0)
    turbo_share: float = Field(_GUARD.turbo_share, gt=0, le=1,
                               description="capped: Turbo grants per second at most this share of the knee")
    window_s: float = Field(_GUARD.rate_tau_s, gt=0, description="time constant of the offered-load estimate")
    online: bool = Field(False, description="pools with neither knee_rps nor knee_from get a knee learnt online "
                         "from live signals (sched/knee_online.py)")

    @model_validator(mode="after")
    def _ordered(self) -> KneeGuardConfig:
        if not self.leave_capped < self.enter_capped <= self.leave_closed < self.enter_closed:
            raise ValueError("need leave_capped < enter_capped <= leave_closed < enter_closed")
        return self


class Scrape(_Model):
    interval_s: float = Field(1.0, ge=0.1, le=60)
    timeout_s: float = Field(1.0, gt=0)
    stale_after_s: float = Field(_PICK.stale_after_s, gt=0)


class HealthConfig(_Model):
    interval_s: float = Field(1.0, gt=0)
    eject_after_failures: int = Field(_PICK.eject_after_failures, ge=1)
    probe_backoff_s: float = Field(_PICK.probe_backoff_s, gt=0)
    probe_backoff_max_s: float = Field(_PICK.probe_backoff_max_s, gt=0)


class Bands(_Model):
    light_kv: float = Field(_PICK.light_kv, gt=0, le=1)
    saturated_kv: float = Field(_PICK.saturated_kv, gt=0, le=1)
    light_queue_ms: float = Field(_PICK.light_queue_s * 1000, ge=0)
    saturated_queue_ms: float = Field(_PICK.saturated_queue_s * 1000, ge=0)
    scale_out_after_s: float = Field(_PICK.scale_out_after_s, ge=0)
    phase_weight: float = Field(_PICK.phase_weight, ge=0, le=10, description=(
        "phase-aware choice: weight of a replica's DCGM tensor/DRAM pressure for the request's prefill share in its "
        "score (sched/phase.py); 0 turns it off (docs/gateway.md says when to turn it on)"))


class Concurrency(_Model):
    """How each replica's concurrency limit is learned (sched/picker.py)."""

    initial: int = Field(_PICK.initial_limit, ge=1,
                         description="limit before the first scrape; it then grows while the engine keeps up")
    queue_tolerance: float = Field(_PICK.queue_tolerance, ge=0,
                                   description="engine waiting count tolerated before the limit shrinks")
    grow_every_scrapes: int = Field(_PICK.grow_every_scrapes, ge=1,
                                    description="once the limit has been cut, probe one more slot only this often")
    unscraped_limit: int = Field(_PICK.unscraped_limit, ge=1,
                                 description="limit of a replica without load metrics (engine: openai), unless its "
                                 "max_concurrency says otherwise")


class CoalesceConfig(_Model):
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

    def policy(self) -> CoalescePolicy:
        return CoalescePolicy(window_s=self.window_s, max_requests=self.max_requests, max_span_s=self.max_span_s,
                              ignored_fields=frozenset(self.ignore_fields))


class RegionsConfig(_Model):
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


class WarmupConfig(_Model):
    """A warm-up request to each replica when it joins or comes back (sched/warmup.py)."""

    enabled: bool = Field(False, description="off by default: each warm-up is a real (one-token) inference call")
    path: Literal["/v1/chat/completions", "/v1/completions"] = "/v1/chat/completions"
    prompt: str = Field("Hello", min_length=1)
    max_tokens: int = Field(1, ge=1, le=64)
    timeout_s: float = Field(30.0, gt=0)


class Admin(_Model):
    token_sha256: Sha256 | None = Field(None, description="sha256 of the admin bearer token; no admin API if unset")


class Limits(_Model):
    """What one client may cost the gateway, enforced before any key is checked (docs/security.md)."""

    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="largest request body; over it → 413")
    max_header_bytes: int = Field(64 * 1024, ge=1024, description="request line and headers; over it → 431")
    header_timeout_s: float = Field(
        10.0, gt=0, description="from a request's first byte (or a new connection) to the end of its headers → 408")
    body_timeout_s: float = Field(
        10.0, gt=0, description="longest a request body may stall; also the grace before the rate floor applies → 408")
    min_body_rate_bytes_s: float = Field(1024.0, ge=0, description="least average rate of a body after the grace")
    max_tokens: int = Field(
        131072, ge=1, description="the largest max_tokens a request may ask (the models' context); over it → 400, "
        "and the bound on one request's fair-queue cost")
    upstream_connect_timeout_s: float = Field(2.0, gt=0)
    ws_max_message_bytes: int = Field(4096, ge=125, le=1024 * 1024, description="largest WebSocket message (a lease "
                                      "heartbeat needs bytes); over it the connection is closed, code 1009")
    ws_max_connections: int = Field(1024, ge=1, description="open lease WebSockets per worker process, all tenants")
    ws_max_connections_per_tenant: int = Field(16, ge=1, description="open lease WebSockets per worker process "
                                               "and tenant; over either cap → closed at once, code 1013")


class MetricsConfig(_Model):
    """Who may read ``/metrics`` (it names tenants and their traffic)."""

    token_sha256: Sha256 | None = Field(
        None, description="sha256 of a bearer token /metrics then requires; unset with no port: public")
    port: int | None = Field(
        None, ge=0, le=65535, description="serve /metrics only on this port (on listen.host), not the main one")
    host: str | None = Field(None, description="address for the metrics port (default: listen.host)")


class Tls(_Model):
    """HTTPS on the main listener."""

    certfile: str = Field(min_length=1, description="PEM certificate chain")
    keyfile: str = Field(min_length=1, description="PEM private key")


class MeteringConfig(_Model):
    """What a request costs (docs/metering.md)."""

    turbo_cost_multiple: float = Field(2.0, gt=0, description="a Turbo token costs this many Standard tokens")
    relax_cost_multiple: float = Field(1.0, gt=0, description="a Relax token costs this many Standard tokens")


class StoreConfig(_Model):
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
class JobsConfig(_Model):
    """L4 job graphs (``POST /v1/jobs``, sched/jobgraph.py): how large a job may be, how long
    this process remembers it."""

    max_depth: int = Field(_JOBS.max_depth, ge=0, description="longest chain of dependencies (edges)")
    max_fan_out: int = Field(_JOBS.max_fan_out, ge=1, description="most steps depending directly on one step")
    max_steps: int = Field(_JOBS.max_steps, ge=1, description="most steps in one job")
    keep_s: float = Field(3600.0, gt=0, description="a finished job stays readable (GET) this long")
    max_jobs: int = Field(1000, ge=1, description="jobs remembered by one worker; when full, the oldest "
                          "finished goes, and with none finished a new job gets 429")

    def limits(self) -> JobLimits:
        return JobLimits(self.max_depth, self.max_fan_out, self.max_steps)


class LeasesConfig(_Model):
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

    def policy(self) -> LeasePolicy:
        return LeasePolicy(self.duration_s, self.renew_below_s, self.renew_by_s, self.warn_after_s,
                           self.expire_after_s, self.ping_interval_s, self.max_per_tenant, self.keep_expired_s)


class GatewayConfig(_Model):
    listen: Listen = Listen.model_validate({})  # frozen, so one shared default is safe
    admin: Admin = Admin.model_validate({})  # frozen, so one shared default is safe
    limits: Limits = Limits.model_validate({})  # frozen, so one shared default is safe
    metrics: MetricsConfig = MetricsConfig.model_validate({})  # frozen, so one shared default is safe
    tls: Tls | None = None
    tiers: dict[TierName, TierConfig] = Field(_default_tiers())  # type: ignore[arg-type]
    tenants: list[Tenant] = Field(min_length=1)
    pools: list[Pool] = Field(min_length=1)
    scrape: Scrape = Scrape.model_validate({})  # frozen, so one shared default is safe
    health: HealthConfig = HealthConfig.model_validate({})  # frozen, so one shared default is safe
    bands: Bands = Bands.model_validate({})  # frozen, so one shared default is safe
    concurrency: Concurrency = Concurrency.model_validate({})  # frozen, so one shared default is safe
    knee_guard: KneeGuardConfig = KneeGuardConfig.model_validate({})  # frozen, so one shared default is safe
    metering: MeteringConfig = MeteringConfig.model_validate({})  # frozen, so one shared default is safe
    store: StoreConfig | None = Field(None, description="default: SQLite beside the config file when the gateway "
                                      "runs from one (turbogate serve), else memory")
    coalesce: CoalesceConfig = CoalesceConfig.model_validate({})  # frozen, so one shared default is safe
    jobs: JobsConfig = JobsConfig.model_validate({})  # frozen, so one shared default is safe
    leases: LeasesConfig = LeasesConfig.model_validate({})  # frozen, so one shared default is safe
    regions: RegionsConfig | None = Field(None, description="L3: route by client region (docs/gateway.md)")
    warmup: WarmupConfig = WarmupConfig.model_validate({})  # frozen, so one shared default is safe
    service_tier_names: Literal["turbogate", "openai"] = Field(
        "turbogate", description="words for the tier served in answers' service_tier: turbogate's (turbo / "
        "standard / relax) or OpenAI's (priority / default / flex); X-Turbogate-Tier always uses turbogate's")

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "aging_s" in data:
            raise ValueError("'aging_s' was removed: aging let old Standard requests outrank Turbo under "
                             "sustained overload; lower tiers now get tiers.<tier>.min_share of dispatches")
        return data

    @field_validator("tiers")
    @classmethod
    def _all_tiers(cls, v: dict[str, TierConfig]) -> dict[str, TierConfig]:
        defaults = _default_tiers()
        return {name: v.get(name, defaults[name]) for name in ("turbo", "standard", "relax")}

    @model_validator(mode="after")
    def _unique(self) -> GatewayConfig:
        names = [t.name for t in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError("tenants: names must be unique")
        keys = [k for t in self.tenants for k in t.key_sha256]
        if len(set(keys)) != len(keys):
            raise ValueError("tenants: the same key_sha256 is given to two tenants")
        pools = [p.name for p in self.pools]
        if len(set(pools)) != len(pools):
            raise ValueError("pools: names must be unique")
        if self.regions is not None:  # a pool region in the RTT table must be some pool's
            regions = {p.region for p in self.pools if p.region is not None}
            for client, table in self.regions.rtt_ms.items():
                for region in table:
                    if region not in regions:
                        raise ValueError(f"regions.rtt_ms.{client}.{region}: no pool has region {region!r}")
        if self.bands.light_kv > self.bands.saturated_kv:
            raise ValueError("bands.light_kv must not exceed bands.saturated_kv")
        return self


def parse_config(data: Any, source: str = "config") -> GatewayConfig:
    """Validate a loaded mapping; a ``ConfigError`` names each bad field (``tiers.turbo.weight: ...``)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe_validation_error(exc)}") from None


def load_config(path: str | Path) -> GatewayConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({exc})") from None
    return parse_config(data, str(p))


def json_schema() -> dict[str, Any]:
    return GatewayConfig.model_json_schema()


def main(argv: list[str] | None = None) -> int:
    """``python -m turbogate.config [OUT]``: write (or print) the JSON schema."""
    args = sys.argv[1:] if argv is None else argv
    text = json.dumps(json_schema(), indent=2) + "\n"
    if args:
        Path(args[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
