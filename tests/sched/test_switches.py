"""The admin switches shared through the store (sched/switches.py): their names, and what a
stored switch asks of a process, without a store."""

from __future__ import annotations

import pytest

from turbogate.sched import Tier
from turbogate.sched.switches import (
    LocalWrites,
    SetTenantTurbo,
    SetTier,
    budget_changes,
    budget_write,
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


def test_a_read_leaves_alone_switches_written_here_since_it_began() -> None:
    writes, turbo, acme = LocalWrites(), tier_switch(Tier.TURBO), tenant_switch("acme")
    with writes.writing(turbo):
        pass
    mark = writes.read_began()
    assert writes.newer(mark) == frozenset()  # written before the read: the store has it
    with writes.writing(acme):
        assert writes.newer(mark) == {acme}
    assert writes.newer(mark) == {acme}  # done, but after the read began: the read may be older
    assert writes.newer(writes.read_began()) == frozenset()
    with writes.writing(turbo):
        later = writes.read_began()
        assert writes.newer(later) == {turbo}  # still being written: the store may not have it yet
    assert writes.newer(later) == frozenset()
    with pytest.raises(OSError), writes.writing(acme):  # a failed write ends too
        raise OSError("store down")
    assert writes.newer(writes.read_began()) == frozenset()


def test_changes_skip_the_switches_newer_here() -> None:
    stored = {tier_switch(Tier.TURBO): False, tenant_switch("acme"): False}
    everything = {Tier.TURBO, Tier.STANDARD, Tier.RELAX}
    assert switch_changes(stored, everything, TENANTS, {tier_switch(Tier.TURBO)}) == [SetTenantTurbo("acme", False)]
    assert switch_changes(stored, everything, TENANTS, set(stored)) == []


def test_budget_changes_are_this_config_s_tenants_not_newer_here() -> None:
    stored = {"acme": (100.0, "month"), "basic": (None, "day"), "gone": (5.0, "month")}
    assert budget_changes(stored, TENANTS) == [("acme", 100.0, "month"), ("basic", None, "day")]
    assert budget_changes(stored, TENANTS, {budget_write("acme")}) == [("basic", None, "day")]
