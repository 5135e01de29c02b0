"""The admin switches shared through the store (sched/switches.py): their names, and what a
stored switch asks of a process, without a store."""

from __future__ import annotations

from turbogate.sched import Tier
from turbogate.sched.switches import (
    SetTenantTurbo,
    SetTier,
    parse_switch,
    switch_changes,
    tenant_switch,
    tier_switch,
)

TENANTS = ("acme", "basic")


def test_a_switch_written_is_read_back_as_the_same_change() -> None:
    assert parse_switch(tier_switch(Tier.TURBO), False, TENANTS) == SetTier(Tier.TURBO, False)
    assert parse_switch(tier_switch(Tier.RELAX), True, TENANTS) == SetTier(Tier.RELAX, True)
    assert parse_switch(tenant_switch("acme"), False, TENANTS) == SetTenantTurbo("acme", False)


def test_names_this_process_does_not_know_are_ignored() -> None:
    assert parse_switch(tier_switch(Tier.STANDARD), False, TENANTS) is None  # the fallback is never off
    assert parse_switch("tier:warp", False, TENANTS) is None
    assert parse_switch(tenant_switch("someone-else"), False, TENANTS) is None  # not in this config
    assert parse_switch("region:eu", False, TENANTS) is None
    assert parse_switch("acme", False, TENANTS) is None


def test_changes_are_only_tier_switches_that_differ_and_every_tenant_switch() -> None:
    stored = {tier_switch(Tier.TURBO): True, tier_switch(Tier.RELAX): False, tenant_switch("acme"): True,
              tenant_switch("gone"): False}
    changes = switch_changes(stored, {Tier.TURBO, Tier.STANDARD, Tier.RELAX}, TENANTS)
    assert changes == [SetTier(Tier.RELAX, False), SetTenantTurbo("acme", True)]
    assert switch_changes(stored, {Tier.STANDARD}, TENANTS) == [SetTier(Tier.TURBO, True),
                                                               SetTenantTurbo("acme", True)]
