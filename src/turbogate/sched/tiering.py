"""Tier resolution at the edge of the flow: the tier a request asks, and the tier it is served.

asked (``service_tier`` in the body → ``X-Turbogate-Tier`` → the tenant's default; a lease asks
Turbo) → entitled (the tenant's tiers) → switches (global, then per tenant; Standard cannot be
switched off) → a spent Turbo budget → served, with the reason whenever served differs from
asked.  The knee guard and L3's fallback may lower it further afterwards (sched/flow.py).
"""

from __future__ import annotations

from collections.abc import Set

from turbogate.sched.actions import Respond
from turbogate.sched.metering import BUDGET_SPENT
from turbogate.sched.policy import TenantSpec
from turbogate.sched.tiers import Tier, parse_tier, resolve_tier

_TURBO, _STANDARD = Tier.TURBO, Tier.STANDARD  # read per request: module names, not class attributes


def asked_tier(tenant: TenantSpec, tier_body: object, tier_header: str | None) -> Tier | Respond:
    """The tier the request asks, or the 400 naming the field whose value is unknown."""
    if tier_body is not None:
        asked = parse_tier(tier_body)
        if asked is None:
            return Respond(None, 400, "invalid_value", f"unknown service_tier {tier_body!r}; use priority/turbo, "
                           "default/auto/standard or flex/relax", param="service_tier")
        return asked
    if tier_header is not None:
        asked = parse_tier(tier_header)
        if asked is None:
            return Respond(None, 400, "invalid_value", "unknown X-Turbogate-Tier header value",
                           param="X-Turbogate-Tier")
        return asked
    return tenant.default_tier


def served_tier(tenant: TenantSpec, asked: Tier, enabled: Set[Tier], turbo_off: Set[str],
                budget_spent: bool) -> tuple[Tier, str | None]:
    """The tier served for ``asked``, and why it differs (None when it does not)."""
    usable = enabled
    if tenant.name in turbo_off and _TURBO in usable:
        usable = usable - {_TURBO}
    served = resolve_tier(asked, tenant.allowed, usable)
    if budget_spent and served is _TURBO:
        return _STANDARD, BUDGET_SPENT
    if served is asked:
        return served, None
    if asked not in tenant.allowed:
        return served, "not_entitled"
    if asked not in enabled:
        return served, "tier_disabled"
    return served, "tenant_switched_off"
