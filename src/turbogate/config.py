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
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from turbogate.config_base import ConfigModel, RegionName, Sha256, TierName
from turbogate.config_edge import Admin, Limits, Listen, MetricsConfig, Tls
from turbogate.config_pools import (
    UNSCRAPED_KINDS,
    Bands,
    Concurrency,
    EngineKind,
    HealthConfig,
    KneeGuardConfig,
    PlanKnee,
    Pool,
    Replica,
    Scrape,
)
from turbogate.config_services import (
    CoalesceConfig,
    JobsConfig,
    LeasesConfig,
    MeteringConfig,
    RegionsConfig,
    StoreConfig,
    WarmupConfig,
)
from turbogate.config_tenants import Tenant, TierConfig, _default_tiers
from turbogate.validation import read_yaml, validate_document

# The sections live in config_*.py by area; this module is the config's public API.
__all__ = [
    "UNSCRAPED_KINDS", "Admin", "Bands", "CoalesceConfig", "Concurrency", "EngineKind", "GatewayConfig",
    "HealthConfig", "JobsConfig", "KneeGuardConfig", "LeasesConfig", "Limits", "Listen", "MeteringConfig",
    "MetricsConfig", "PlanKnee", "Pool", "RegionName", "RegionsConfig", "Replica", "Scrape", "Sha256",
    "StoreConfig", "Tenant", "TierConfig", "TierName", "Tls", "WarmupConfig", "_default_tiers", "hash_key",
    "json_schema", "load_config", "main", "parse_config",
]


def hash_key(key: str) -> str:
    """The sha256 hex digest under which ``key`` is stored in the config."""
    return hashlib.sha256(key.encode()).hexdigest()



class GatewayConfig(ConfigModel):
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
    return validate_document(GatewayConfig, data, source)


def load_config(path: str | Path) -> GatewayConfig:
    p = Path(path)
    return parse_config(read_yaml(p), str(p))


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

