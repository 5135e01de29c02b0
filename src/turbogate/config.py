"""Gateway configuration: pydantic models, YAML loading, key hashing and the JSON schema.

API keys and the admin token are stored as sha256 hex digests, never in clear; produce one
with ``turbogate serve --hash-key KEY``.  ``python -m turbogate.config`` prints the JSON
schema (kept in ``schemas/gateway.schema.json``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from turbogate.errors import ConfigError
from turbogate.sched.admission import TierPolicy
from turbogate.sched.guard import GuardPolicy, KneeSource
from turbogate.sched.picker import PickerConfig
from turbogate.sched.policy import FlowPolicy, Mode, PoolSpec, ReplicaSpec, TenantSpec
from turbogate.sched.tiers import Tier

EngineKind = Literal["vllm", "sglang", "tgi", "llamacpp", "openai", "emulator"]
# Kinds whose server has no load metrics by default (docs/engines.md): L2 counts its own in-flight requests.
UNSCRAPED_KINDS: frozenset[str] = frozenset({"openai", "llamacpp"})
TierName = Literal["turbo", "standard", "relax"]
#: The pure core's defaults: the config's defaults are read from here, never written twice.
_PICK = PickerConfig()
_GUARD = GuardPolicy()

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="sha256 hex digest (lower case)")]


def hash_key(key: str) -> str:
    """The sha256 hex digest under which ``key`` is stored in the config."""
    return hashlib.sha256(key.encode()).hexdigest()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Listen(_Model):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)


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
    queue_budget_s: float = Field(30.0, gt=0, description="longest a request may wait before it is shed (503)")
    deadline_s: float = Field(300.0, gt=0, description="arrival to full answer (first byte for streams) → 504")
    enabled: bool = True

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in _REMOVED_TIER_KEYS.items():
                if key in data:
                    raise ValueError(f"{key!r} was removed: {why}")
        return data


def _default_tiers() -> dict[str, TierConfig]:
    return {
        "turbo": TierConfig(min_share=0.0, capacity_share=1.0, max_utilization=1.0, queue_bound=256,
                            queue_budget_s=5, deadline_s=120),
        "standard": TierConfig(min_share=0.2, capacity_share=0.9, max_utilization=0.85, queue_bound=1024,
                               queue_budget_s=30, deadline_s=300),
        "relax": TierConfig(min_share=0.05, capacity_share=0.5, max_utilization=0.7, queue_bound=4096,
                            queue_budget_s=120, deadline_s=600),
    }


class Tenant(_Model):
    name: str = Field(min_length=1)
    key_sha256: list[Sha256] = Field(min_length=1, description="sha256 of each API key of this tenant")
    tiers: list[TierName] = Field(["standard", "relax"], min_length=1)
    default_tier: TierName = "standard"
    weight: float = Field(1.0, gt=0, description="fair-share weight within a tier")
    max_in_flight: int | None = Field(None, ge=1, description="queued + running cap; over it → 429")

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


class Pool(_Model):
    name: str = Field(min_length=1)
    models: list[str] = Field(min_length=1, description="model names this pool serves")
    replicas: list[Replica] = Field(min_length=1)
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "fcfs", description="'priority' when the engines run vLLM --scheduling-policy priority: the tier is "
        "then passed as the request's priority field"
    )
    region: str | None = None
    knee_rps: float | None = Field(
        None, gt=0, description="the pool's knee (offered req/s, all tiers): with one, a knee guard caps and then "
        "closes Turbo past it (docs/gateway.md)")
    knee_from: str | None = Field(
        None, description="a bench or sim run folder whose measured knee (tier 'all') is the pool's knee")

    @model_validator(mode="after")
    def _one_knee(self) -> Pool:
        if self.knee_rps is not None and self.knee_from is not None:
            raise ValueError("give knee_rps or knee_from, not both")
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
        models = [m for p in self.pools for m in p.models]
        if len(set(models)) != len(models):
            raise ValueError("pools: a model is served by two pools")
        if self.bands.light_kv > self.bands.saturated_kv:
            raise ValueError("bands.light_kv must not exceed bands.saturated_kv")
        return self


def _describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        msg = msg.replace("Input should be greater than", "must be >").replace("Input should be less than", "must be <")
        lines.append(f"{loc}: {msg}")
    return "; ".join(lines)


def parse_config(data: Any, source: str = "config") -> GatewayConfig:
    """Validate a loaded mapping; a ``ConfigError`` names each bad field (``tiers.turbo.weight: ...``)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from None


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
        )
        for name, t in config.tiers.items()
    }
    tenants = tuple(
        TenantSpec(t.name, frozenset(Tier(x) for x in t.tiers), Tier(t.default_tier), t.weight, t.max_in_flight)
        for t in config.tenants
    )
    if pools is None:
        pools = [
            PoolSpec(p.name, tuple(p.models),
                     tuple(ReplicaSpec(rid, r.max_concurrency, r.scraped) for rid, r in replica_ids(p)),
                     p.scheduling_policy == "priority", knee_source(p))
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
                      max_cost_tokens=config.limits.max_tokens)


def knee_source(pool: Pool) -> KneeSource | None:
    """The pool's knee for its guard: a fixed value, or a run folder's measured knee (the file
    is read here, at the edge).  ``ConfigError`` when the folder has no knee to give."""
    if pool.knee_rps is not None:
        return KneeSource("config", pool.knee_rps)
    if pool.knee_from is None:
        return None
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
