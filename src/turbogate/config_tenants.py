"""The config's tiers and tenants: each tier's queueing policy, each tenant's keys, tiers and limits."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from turbogate.config_base import ConfigModel, Sha256, TierName
from turbogate.dscp import parse_dscp

_REMOVED_TIER_KEYS = {
    "weight": "tiers now take strict precedence (Turbo, then Standard, then Relax); give a lower tier a "
              "guaranteed share of dispatches with min_share instead (docs/gateway.md)",
}


class TierConfig(ConfigModel):
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


class Tenant(ConfigModel):
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
