"""Admin API (bearer admin token): hot switches and a state dump.

``POST /admin/tiers/{tier}`` ``{"enabled": bool}`` — switch Turbo (or Relax) off/on globally;
``POST /admin/tenants/{name}`` ``{"turbo_enabled": bool}`` — the same for one tenant;
``GET /admin/state`` — switches, queues, knee guards, replicas with their bands and scores;
``GET /admin/events`` — the knee guards' state changes with the signals that caused them;
``POST /admin/pools/{pool}/guard`` ``{"state": "open"|"capped"|"closed"|null}`` — pin a pool's
knee guard, or hand it back to the load.
Switches act on the next request; they live in the worker process (see docs/gateway.md).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from turbogate.asgi import Receive, Scope, Send, read_body, send_error, send_json
from turbogate.gateway.conformance import method_not_allowed
from turbogate.sched import TIERS, Tier, parse_tier
from turbogate.sched.guard import GuardState
from turbogate.sched.switches import tenant_switch, tier_switch

if TYPE_CHECKING:
    from turbogate.gateway.metering import Metering
    from turbogate.gateway.parts import Auth
    from turbogate.sched import Flow

MAX_BODY = 65536  # an admin switch is a few bytes


def body_limit(max_body: int) -> int:
    """The largest body an admin route reads: the gateway's limit ``max_body``, and at most MAX_BODY."""
    return min(MAX_BODY, max_body)


class TierSwitch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool


class TenantSwitch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turbo_enabled: bool


class GuardSwitch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: Literal["open", "capped", "closed"] | None  # null hands the guard back to the load


def state(flow: Flow, meter: Metering) -> dict[str, Any]:
    picker = flow.picker
    now = time.perf_counter()
    return {
        "tiers": {t.value: {"enabled": t in flow.enabled} for t in TIERS},
        "tenants": {name: {"turbo_enabled": flow.turbo_available(name), "turbo_switched_off": name in flow.turbo_off,
                           "tiers": sorted(x.value for x in t.allowed), "default_tier": t.default_tier.value}
                    for name, t in flow.tenants.items()},
        "pools": {
            name: {
                "models": list(flow.pools[name].spec.models),
                "slots": picker.slots(name, now),
                "healthy_replicas": picker.healthy(name),
                "in_flight": admission.in_flight,
                "queues": admission.snapshot(),
                "scale_out_desired": picker.scale_out_desired(name, now),
                "holdback": admission.holdback,
                "knee_guard": flow.guards[name].describe(now) if name in flow.guards else None,
            }
            for name, admission in flow.admissions()
        },
        "replicas": list(picker.describe(now)),
        # The hung-replica rule's view (sched/hung.py): requests each replica holds, its measured pace.
        "hung": {"found": flow.hung.found, "replicas": {r.id: flow.hung.describe(r.id) for r in picker.replicas()}},
        "store": meter.describe(),
        "regions": flow.regions.snapshot() if flow.l3 else None,  # L3's latency estimates (sched/regions.py)
    }


async def read_model(receive: Receive, send: Send, model: type[BaseModel], limit: int) -> BaseModel | None:
    """The body as ``model``, or None once a 400 naming the field went out (or the client left)."""
    raw = await read_body(receive, limit)  # over it: BodyTooLarge, answered 413 by routes.py
    if raw is None:
        return None
    try:
        return model.model_validate(orjson.loads(raw))
    except orjson.JSONDecodeError:
        await send_error(send, 400, "request body is not valid JSON", code="invalid_json")
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        await send_error(send, 400, f"{param}: {err['msg']}", param=param, code="invalid_value")
    return None


class AdminApi:
    """The admin routes: switches and state of ``flow``, shared through ``meter``'s store."""

    def __init__(self, auth: Auth, flow: Flow, meter: Metering, max_body: int) -> None:
        self.auth = auth
        self.flow = flow
        self.meter = meter
        self.max_body = body_limit(max_body)

    async def _body(self, receive: Receive, send: Send, model: type[BaseModel]) -> BaseModel | None:
        return await read_model(receive, send, model, self.max_body)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.auth.admin(scope):
            await self.auth.not_admin(send)
            return
        path: str = scope["path"]
        method: str = scope["method"]
        parts = path.strip("/").split("/")
        allowed = _allowed(parts)
        if allowed is None:
            await send_error(send, 404, f"no admin route {path}", code="not_found")
            return
        if method not in allowed:
            await method_not_allowed(send, path, *allowed)
            return
        if parts == ["admin", "state"]:
            await send_json(send, 200, state(self.flow, self.meter))
            return
        if parts == ["admin", "events"]:
            guards = self.flow.guards
            await send_json(send, 200, {"events": sorted(
                ({"pool": pool, "at": e.at, "from": e.before.value, "to": e.after.value,
                  "load_rps": round(e.load_rps, 3), "knee_rps": e.knee_rps, "why": e.why}
                 for pool, g in guards.items() for e in g.events),
                key=lambda e: float(e["at"]))})
            return
        if len(parts) == 4 and parts[1] == "pools" and parts[3] == "guard":
            guard = self.flow.guards.get(parts[2])
            if guard is None:
                await send_error(send, 404, f"pool {parts[2]!r} has no knee guard (give it knee_rps or knee_from)",
                                 param="pool", code="not_found")
                return
            body = await self._body(receive, send, GuardSwitch)
            if isinstance(body, GuardSwitch):
                guard.override(None if body.state is None else GuardState(body.state), time.perf_counter())
                await send_json(send, 200, {"pool": parts[2], "forced": body.state})
            return
        if parts[1] == "tiers":
            tier = parse_tier(parts[2])
            if tier is None or tier is Tier.STANDARD:  # the flow refuses it too; say so before reading a body
                await send_error(send, 400, "only turbo and relax can be switched (standard is the fallback)",
                                 param="tier", code="invalid_value")
                return
            body = await self._body(receive, send, TierSwitch)
            if isinstance(body, TierSwitch):
                self.flow.set_tier(tier, body.enabled)
                await self.meter.share_switch(tier_switch(tier), body.enabled)  # every process sharing the store
                await send_json(send, 200, {"tier": tier.value, "enabled": body.enabled})
            return
        if parts[1] == "tenants":
            tenant = self.flow.tenants.get(parts[2])
            if tenant is None:
                await send_error(send, 404, f"no tenant {parts[2]!r}", param="tenant", code="not_found")
                return
            body = await self._body(receive, send, TenantSwitch)
            if isinstance(body, TenantSwitch):
                self.flow.set_tenant_turbo(tenant.name, body.turbo_enabled)
                await self.meter.share_switch(tenant_switch(tenant.name), body.turbo_enabled)
                await send_json(send, 200, {"tenant": tenant.name, "turbo_enabled": body.turbo_enabled})
            return


def _allowed(parts: list[str]) -> tuple[str, ...] | None:
    """The methods an admin path takes (None: no such route)."""
    if parts in (["admin", "state"], ["admin", "events"]):
        return ("GET",)
    if len(parts) == 4 and parts[1] == "pools" and parts[3] == "guard" and parts[2]:
        return ("POST",)
    if len(parts) == 3 and parts[1] in ("tiers", "tenants") and parts[2]:
        return ("POST",)
    return None
