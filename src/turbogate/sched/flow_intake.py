"""A request's intake (``Flow.open``): its tier (asked → entitled → switches → lease → L3's
fallback → knee guard → Turbo's supply), its pool (L3, sched/regions.py), its fair-queue cost,
or the 4xx that refuses it.  Pure: ``now`` is passed in; called by sched/flow.py."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from turbogate.sched.actions import PRIORITY, FlowRequest, Respond
from turbogate.sched.admission import TierPolicy
from turbogate.sched.regions import pool_view, turbo_candidates
from turbogate.sched.tiering import asked_tier
from turbogate.sched.tiers import Tier
from turbogate.sched.turbo_supply import turbo_excess

if TYPE_CHECKING:
    from turbogate.sched.flow import Flow

_TURBO, _STANDARD = Tier.TURBO, Tier.STANDARD


def open_request(flow: Flow, tenant: str, model: str, tier_body: object, tier_header: str | None,
                 max_tokens: object, max_tokens_field: str, prompt_bytes: int, stream: bool, now: float,
                 handle: object, lease: str | None, client_region: str | None,
                 session: str | None) -> FlowRequest | Respond:
    """See ``Flow.open``."""
    spec = flow.tenants[tenant]
    policy = flow.policy
    cap = policy.max_cost_tokens
    given = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None
    if given is not None and given > cap:
        return Respond(None, 400, "invalid_value", f"{max_tokens_field} is {max_tokens}, above the context "
                       f"limit of {cap} tokens", param=max_tokens_field)
    pools = flow.pools_of_model.get(model)
    if pools is None:
        return Respond(None, 404, "model_not_found", f"The model `{model}` does not exist or you do not have "
                       "access to it", param="model")
    asked = asked_tier(spec, tier_body, tier_header)
    if isinstance(asked, Respond):
        return asked
    lease_why = None
    if lease is not None:  # the lease asks Turbo; once expired (or unknown) it gets Standard, and says why
        asked = Tier.TURBO
        lease_why = flow.leases.check(lease, tenant, now)
    served, why = flow.resolve(spec, asked if lease_why is None else Tier.STANDARD)
    why = lease_why or why
    pool, client, fallback = choose_pool(flow, pools, served, client_region, tenant, session, now)
    if fallback is not None:  # every Turbo pool is down: served Standard by a Standard pool
        served, why = Tier.STANDARD, fallback
    guard = flow.guards.get(pool)
    if guard is not None:
        guard.observe(now)
        if served is _TURBO:
            refused = guard.grant(now)
            if refused is not None:  # past the knee: served Standard, and the answer says why
                served, why = _STANDARD, refused
    if served is _TURBO and flow._tiered:  # beyond what the pool can give Turbo: told at once
        excess = turbo_excess(flow.pools[pool].admission, flow.picker, pool, now)
        if excess is not None:
            served, why = _STANDARD, excess
    tokens = given if given is not None and given > 0 else policy.default_max_tokens
    tokens = flow.lengths.cost_tokens(model, tokens)  # far above the usual answer: an estimate
    cost = float(min(tokens, cap)) + min(prompt_bytes / 4.0, float(cap))
    flow._ids += 1
    priority = PRIORITY[served] if flow.pools[pool].spec.priority_field else None
    req = FlowRequest(flow._ids, tenant, pool, model, asked, served, why, stream, cost, now, handle, priority,
                      client)
    req.prefill_share = 1.0 - min(tokens, cap) / cost if cost > 0 else 0.0  # the prompt's part
    return req


def choose_pool(flow: Flow, pools: list[str], served: Tier, client_region: str | None, tenant: str,
                session: str | None, now: float) -> tuple[str, str, str | None]:
    """L3 (sched/regions.py): the pool, the client's region key, and why Turbo falls back."""
    client = flow.regions.client(client_region)
    if len(pools) == 1 and (served is not _TURBO or flow._turbo_capable.get(pools[0], True)):
        return pools[0], client, None  # one pool for the model, and it serves this tier
    fallback = None
    if served is _TURBO:
        healthy = {p: flow.picker.slots(p, now) > 0 for p in pools} if len(pools) > 1 else {}
        pools, fallback = turbo_candidates(pools, flow._turbo_capable, healthy)
    if len(pools) == 1:
        return pools[0], client, fallback
    tier = Tier.STANDARD if fallback is not None else served
    tier_policy = flow.policy.tiers.get(tier) or TierPolicy()
    picker, regions = flow.picker, flow.regions
    views = [regions.view(p, tier, now, partial(pool_view, p, picker, flow.pools[p].admission, tier, tier_policy,
                                                now)) for p in pools]
    choice = regions.choose(client, (tenant, session) if session else None, views, now)
    return choice.pool, client, fallback
