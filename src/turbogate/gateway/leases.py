"""Turbo leases over HTTP and WebSocket; the rules are the pure core's (sched/leases.py).

``POST /v1/turbo/leases`` — grant a lease (tenants entitled to Turbo only; else 403);
``GET /v1/turbo/leases/{id}`` — its state;
``POST /v1/turbo/leases/{id}/heartbeat`` — keep it alive (410 once expired);
``WS /v1/turbo/leases/{id}/ws`` — every message from the client is a heartbeat, answered with the
lease's state; the server also sends the state when it changes (warn), and closes with code
4001 when the lease expires.

A request with ``X-Turbogate-Lease: <id>`` is served Turbo while the lease lives and Standard
after (``X-Turbogate-Downgrade: lease_expired``): that rule is the flow's (``Flow.open``).
Leases are shared by every worker and gateway through the store (gateway/lease_share.py):
a heartbeat or a request with the lease may reach any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import time
from typing import TYPE_CHECKING, Any

import orjson

from turbogate.asgi import Message, Receive, Scope, Send, read_body, send_error, send_json
from turbogate.gateway.conformance import method_not_allowed
from turbogate.sched.leases import Lease, LeaseExpired, LeasePolicy, LeaseState, TooManyLeases, UnknownLease
from turbogate.sched.tiers import Tier

if TYPE_CHECKING:
    from turbogate.config import Limits
    from turbogate.gateway.lease_share import SharedLeases
    from turbogate.gateway.parts import Auth, Shed
    from turbogate.sched import Flow

PREFIX = "/v1/turbo/leases"
WS_EXPIRED = 4001  # close code sent when the lease expires (4000-4999: the application's own)
WS_TOO_BIG = 1009  # RFC 6455: a message too big to process
WS_TRY_LATER = 1013  # RFC 6455 (IANA): try again later


class WsConnections:
    """Open lease WebSockets of one worker, per tenant and in all, against the caps in ``limits``
    (each connection holds a task and buffers, so a tenant must not open them without end)."""

    def __init__(self, limits: Limits) -> None:
        self.max_total = limits.ws_max_connections
        self.max_per_tenant = limits.ws_max_connections_per_tenant
        self.max_message = limits.ws_max_message_bytes
        self.total = 0
        self.by_tenant: dict[str, int] = {}

    def refusal(self, tenant: str) -> str | None:
        """Why one more connection of ``tenant`` is refused, or None when it may open."""
        if self.by_tenant.get(tenant, 0) >= self.max_per_tenant:
            return f"tenant {tenant!r} has {self.max_per_tenant} lease WebSockets open, the most allowed " \
                   "(limits.ws_max_connections_per_tenant); heartbeat several leases over one, or by HTTP"
        if self.total >= self.max_total:
            return f"the gateway has {self.max_total} lease WebSockets open, the most allowed " \
                   "(limits.ws_max_connections); retry later, or heartbeat by HTTP"
        return None

    def opened(self, tenant: str) -> None:
        self.total += 1
        self.by_tenant[tenant] = self.by_tenant.get(tenant, 0) + 1

    def closed(self, tenant: str) -> None:
        self.total -= 1
        left = self.by_tenant[tenant] - 1
        if left:
            self.by_tenant[tenant] = left
        else:
            del self.by_tenant[tenant]


def view(lease: Lease, policy: LeasePolicy, now: float, renewed: bool | None = None) -> dict[str, Any]:
    p = policy
    # An expired lease has no time left; its expires_at is when it expired.
    remaining = 0.0 if lease.expired_at is not None else lease.remaining(now)
    ends = now + remaining if lease.expired_at is None else lease.expired_at
    out: dict[str, Any] = {
        "id": lease.id, "object": "turbo.lease", "state": lease.state.value, "reason": lease.reason,
        "expires_in_s": round(remaining, 3), "expires_at": round(time.time() + ends - now, 3),
        "silent_s": round(max(0.0, now - lease.last_heartbeat), 3), "renewals": lease.renewals,
        "heartbeat": {"interval_s": p.ping_interval_s, "warn_after_s": p.warn_after_s,
                      "expire_after_s": p.expire_after_s, "http": f"{PREFIX}/{lease.id}/heartbeat",
                      "ws": f"{PREFIX}/{lease.id}/ws"},
    }
    if renewed is not None:
        out["renewed"] = renewed
    return out


class LeasesApi:
    """The lease routes (HTTP and WebSocket) over ``shared``, the leases every process shares."""

    def __init__(self, auth: Auth, flow: Flow, shared: SharedLeases, ws_connections: WsConnections, shed: Shed,
                 max_body: int) -> None:
        self.auth = auth
        self.flow = flow
        self.shared = shared
        self.ws_connections = ws_connections
        self.shed = shed
        self.max_body = max_body

    def view(self, lease: Lease, now: float, renewed: bool | None = None) -> dict[str, Any]:
        return view(lease, self.flow.leases.policy, now, renewed)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        tenant = self.auth.tenant(scope)
        if tenant is None:
            await self.auth.unauthorized(send)
            return
        shared = self.shared
        method: str = scope["method"]
        if method == "POST" and await read_body(receive, self.max_body) is None:  # unused, but held to the one limit
            return  # the client left
        parts = scope["path"][len(PREFIX):].strip("/").split("/")
        now = time.perf_counter()
        if parts == [""]:
            if method != "POST":
                await method_not_allowed(send, PREFIX, "POST")
                return
            if Tier.TURBO not in self.flow.tenants[tenant.name].allowed:
                await send_error(send, 403, f"tenant {tenant.name!r} is not entitled to Turbo, so it cannot hold a "
                                 "Turbo lease", code="not_entitled")
                return
            try:
                lease = await shared.grant("lease_" + secrets.token_urlsafe(16), tenant.name, now)
            except TooManyLeases as exc:
                await self.shed.refuse(send, 429, str(exc), "too_many_leases", 60)
                return
            await send_json(send, 201, self.view(lease, now))
            return
        try:
            allowed = ({1: "GET", 2: {"heartbeat": "POST", "ws": "GET"}.get(parts[-1])}.get(len(parts))
                       if parts[0] else None)
            if allowed is None:
                await send_error(send, 404, f"no route {scope['path']}: use GET {PREFIX}/{{id}}, POST "
                                 f"{PREFIX}/{{id}}/heartbeat or a WebSocket on {PREFIX}/{{id}}/ws", code="not_found")
            elif method != allowed:
                await method_not_allowed(send, scope["path"], allowed)
            elif len(parts) == 1:
                await send_json(send, 200, self.view(await shared.get(parts[0], tenant.name, now), now))
            elif parts[1] == "heartbeat":
                lease, renewed = await shared.heartbeat(parts[0], tenant.name, now)
                await send_json(send, 200, self.view(lease, now, renewed))
            else:  # a plain GET on the WebSocket route
                await send_error(send, 426, f"{scope['path']} is a WebSocket: send Upgrade: websocket",
                                 code="upgrade_required", headers=[(b"upgrade", b"websocket")])
        except UnknownLease as exc:
            await send_error(send, 404, str(exc), param="id", code="lease_not_found")
        except LeaseExpired as exc:
            await send_error(send, 410, str(exc), param="id", code="lease_expired")

    async def handle_ws(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/v1/turbo/leases/{id}/ws``: heartbeats by WebSocket (see the module docstring)."""
        first = await receive()  # websocket.connect
        if first["type"] != "websocket.connect":
            return
        parts = scope["path"][len(PREFIX):].strip("/").split("/")
        tenant = self.auth.tenant(scope)
        if not scope["path"].startswith(PREFIX + "/") or len(parts) != 2 or parts[1] != "ws" or tenant is None:
            await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets 403
            return
        try:
            lease = await self.shared.get(parts[0], tenant.name, time.perf_counter())
        except UnknownLease:
            await send({"type": "websocket.close", "code": 1008})
            return
        conns: WsConnections = self.ws_connections
        await send({"type": "websocket.accept"})
        refusal = conns.refusal(tenant.name)
        if refusal is not None:  # accepted only to say why: a refused handshake carries no reason
            await send({"type": "websocket.close", "code": WS_TRY_LATER, "reason": refusal[:120]})
            return
        conns.opened(tenant.name)
        inbox: asyncio.Queue[Message] = asyncio.Queue()

        async def read() -> None:
            while True:
                message = await receive()
                await inbox.put(message)
                if message["type"] == "websocket.disconnect":
                    return

        reader = asyncio.get_running_loop().create_task(read())
        try:
            await self._serve_ws(lease, tenant.name, inbox, send)
        except OSError:  # the client vanished while we were telling it the state: nothing left to do
            pass
        finally:
            conns.closed(tenant.name)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _serve_ws(self, lease: Lease, tenant: str, inbox: asyncio.Queue[Message], send: Send) -> None:
        shared = self.shared
        book = shared.book

        async def tell(renewed: bool | None = None) -> None:
            await send({"type": "websocket.send", "text": orjson.dumps(
                {"type": "lease", **self.view(lease, time.perf_counter(), renewed)}).decode()})

        await tell()
        state = lease.state
        while True:
            now = time.perf_counter()
            # Heartbeats may reach other processes: the store's times decide (the copy may be new).
            with contextlib.suppress(UnknownLease):
                lease = await shared.get(lease.id, tenant, now)
            book.advance(lease, now)
            if lease.state is not state:
                state = lease.state
                await tell()
            if state is LeaseState.EXPIRED:
                await send({"type": "websocket.close", "code": WS_EXPIRED, "reason": f"lease expired: {lease.reason}"})
                return
            wait = book.next_change_at(lease) - now
            try:
                message = await asyncio.wait_for(inbox.get(), timeout=None if math.isinf(wait) else max(wait, 0.0))
            except TimeoutError:
                continue
            if message["type"] == "websocket.disconnect":
                return
            size = len(message.get("text") or message.get("bytes") or b"")
            # Under ``turbogate serve`` the server's ws_max_size stops it sooner.
            if size > self.ws_connections.max_message:
                await send({"type": "websocket.close", "code": WS_TOO_BIG,
                            "reason": f"a message is at most {self.ws_connections.max_message} bytes (a heartbeat)"})
                return
            try:  # any message is a heartbeat (the client pings every ping_interval_s)
                lease, renewed = await shared.heartbeat(lease.id, tenant, time.perf_counter())
            except (LeaseExpired, UnknownLease):
                continue  # the loop sees the expiry and closes
            state = lease.state
            await tell(renewed)


LEASE_HEADER = b"x-turbogate-lease"


def lease_of(raw: bytes | None) -> str | None:
    """The lease id from an ``X-Turbogate-Lease`` value ``raw`` (None: not sent)."""
    return None if raw is None else raw.decode("latin-1").strip()
