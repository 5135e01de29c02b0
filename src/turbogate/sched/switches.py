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

A sync's read of the store takes time, and an admin switch may land in this process meanwhile:
the value read is then older than the process's own, and applying it would undo the switch just
made (Turbo switched back on, then off again by the sync that read the store a moment before).
:class:`LocalWrites` names the switches a read must leave alone for that reason (and the Turbo
budgets, set through the admin API and read back the same way: :func:`budget_write`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
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


def budget_write(tenant: str) -> str:
    """The name :class:`LocalWrites` knows ``tenant``'s Turbo budget by (budgets are stored apart)."""
    return f"budget:{tenant}"


def parse_switch(name: str, on: bool, tenants: Collection[str]) -> SetTier | SetTenantTurbo | None:
    """The change a stored switch asks of a process serving ``tenants``; None: not one it knows."""
    kind, _, what = name.partition(":")
    if kind == _TIER:
        tier = parse_tier(what)
        return SetTier(tier, on) if tier is not None and tier is not Tier.STANDARD else None
    if kind == _TENANT and what in tenants:
        return SetTenantTurbo(what, on)
    return None


def switch_changes(stored: Mapping[str, bool], enabled: Collection[Tier], tenants: Collection[str],
                   newer_here: Collection[str] = ()) -> list[SetTier | SetTenantTurbo]:
    """What the store's switches ask of a process whose tiers ``enabled`` are on: each tier
    switch that differs from it, and every tenant switch (setting one again changes nothing).
    ``newer_here``: switches this process set after the read began (:meth:`LocalWrites.newer`),
    whose stored value may be the older one."""
    changes: list[SetTier | SetTenantTurbo] = []
    for name, on in stored.items():
        if name in newer_here:
            continue
        change = parse_switch(name, on, tenants)
        if isinstance(change, SetTier) and (change.tier in enabled) == on:
            continue
        if change is not None:
            changes.append(change)
    return changes


def budget_changes(stored: Mapping[str, tuple[float | None, str]], tenants: Collection[str],
                   newer_here: Collection[str] = ()) -> list[tuple[str, float | None, str]]:
    """The stored Turbo budgets (tenant → units, period) a process serving ``tenants`` applies:
    each of its tenants' but those it set itself after the read began (``newer_here``)."""
    return [(tenant, units, period) for tenant, (units, period) in stored.items()
            if tenant in tenants and budget_write(tenant) not in newer_here]


class LocalWrites:
    """This process's own switch (and budget) writes, so that a sync applies no value older than them.

    A write counts from the moment the switch is set here until its store write is done; a
    read began at :meth:`read_began`'s mark leaves alone every switch written since, or still
    being written (the store may not have it yet)."""

    __slots__ = ("_count", "_last", "_writing")

    def __init__(self) -> None:
        self._count = 0
        self._last: dict[str, int] = {}
        self._writing: dict[str, int] = {}

    @contextmanager
    def writing(self, name: str) -> Iterator[None]:
        """While the block runs, ``name`` is being written here: set in this process and on its
        way to the store.  It counts as newer than any read begun before the block ends (done or
        failed: after a failure the next sync's read is the store's word again)."""
        self._count += 1
        self._last[name] = self._count
        self._writing[name] = self._writing.get(name, 0) + 1
        try:
            yield
        finally:
            left = self._writing[name] - 1
            if left:
                self._writing[name] = left
            else:
                del self._writing[name]

    def read_began(self) -> int:
        """The mark to pass to :meth:`newer` once the read is back."""
        return self._count

    def newer(self, mark: int) -> frozenset[str]:
        """Switches written here since ``mark``, or still being written."""
        return frozenset(name for name, at in self._last.items() if at > mark or name in self._writing)
