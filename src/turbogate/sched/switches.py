"""The admin switches every gateway process shares through the store, as pure rules.

An admin switch (``POST /admin/tiers/{tier}``, ``POST /admin/tenants/{name}``) acts on the
process that took it at once and is written to the store under a name; every other process
reads the stored switches at its sync and applies the changes they ask.  The names, and what a
stored switch means to a process, are decided here:

* ``tier:<tier>`` — a tier on or off for everyone (Turbo or Relax; Standard is the fallback and
  cannot be switched);
* ``tenant:<name>`` — Turbo on or off for one tenant.

A name this process does not know (a tenant not in its config, a tier it cannot switch, a kind
from a newer version) is ignored, not guessed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from turbogate.sched.tiers import Tier, parse_tier

_TIER = "tier"
_TENANT = "tenant"


@dataclass(frozen=True, slots=True)
class SetTier:
    """Switch ``tier`` on or off for every tenant."""

    tier: Tier
    on: bool


@dataclass(frozen=True, slots=True)
class SetTenantTurbo:
    """Switch Turbo on or off for ``tenant``."""

    tenant: str
    on: bool


def tier_switch(tier: Tier) -> str:
    """The stored name of ``tier``'s switch."""
    return f"{_TIER}:{tier.value}"


def tenant_switch(tenant: str) -> str:
    """The stored name of ``tenant``'s Turbo switch."""
    return f"{_TENANT}:{tenant}"


def parse_switch(name: str, on: bool, tenants: Collection[str]) -> SetTier | SetTenantTurbo | None:
    """The change a stored switch asks of a process serving ``tenants``; None: not one it knows."""
    kind, _, what = name.partition(":")
    if kind == _TIER:
        tier = parse_tier(what)
        return SetTier(tier, on) if tier is not None and tier is not Tier.STANDARD else None
    if kind == _TENANT and what in tenants:
        return SetTenantTurbo(what, on)
    return None


def switch_changes(stored: Mapping[str, bool], enabled: Collection[Tier],
                   tenants: Collection[str]) -> list[SetTier | SetTenantTurbo]:
    """What the store's switches ask of a process whose tiers ``enabled`` are on: each tier
    switch that differs from it, and every tenant switch (setting one again changes nothing)."""
    changes: list[SetTier | SetTenantTurbo] = []
    for name, on in stored.items():
        change = parse_switch(name, on, tenants)
        if isinstance(change, SetTier) and (change.tier in enabled) == on:
            continue
        if change is not None:
            changes.append(change)
    return changes
