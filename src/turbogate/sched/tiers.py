"""Tier names and the aliases clients may use for them (hosted-API `service_tier` words included)."""

from __future__ import annotations

from collections.abc import Set
from enum import StrEnum


class Tier(StrEnum):
    """The three service tiers, best first."""

    TURBO = "turbo"
    STANDARD = "standard"
    RELAX = "relax"


#: Best first; index = rank (0 is the most urgent).
TIERS: tuple[Tier, ...] = (Tier.TURBO, Tier.STANDARD, Tier.RELAX)

RANK: dict[Tier, int] = {tier: i for i, tier in enumerate(TIERS)}

#: Each tier's name, for code that names a request's tier on every request: a dict read costs
#: less than the enum's ``value`` property.
TIER_NAME: dict[Tier, str] = {tier: tier.value for tier in TIERS}

ALIASES: dict[str, Tier] = {
    "turbo": Tier.TURBO,
    "priority": Tier.TURBO,
    "standard": Tier.STANDARD,
    "default": Tier.STANDARD,
    "auto": Tier.STANDARD,
    "flex": Tier.RELAX,
    "relax": Tier.RELAX,
}


def parse_tier(value: object) -> Tier | None:
    """The tier a client word names, or ``None`` when it names none (case-insensitive)."""
    if not isinstance(value, str):
        return None
    return ALIASES.get(value.strip().lower())


def resolve_tier(
    asked: Tier,
    allowed: Set[Tier],
    enabled: Set[Tier],
) -> Tier:
    """The tier actually served: the asked one if the tenant may use it and it is switched on,
    else the next lower tier that is allowed and on.  A tenant not entitled to Turbo is served
    Standard rather than refused; if nothing below is allowed, the best allowed tier serves."""
    for tier in TIERS[RANK[asked]:]:
        if tier in allowed and tier in enabled:
            return tier
    for tier in TIERS:
        if tier in allowed and tier in enabled:
            return tier
    return Tier.STANDARD
