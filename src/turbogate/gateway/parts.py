"""The narrow parts the gateway's modules are built from, each passed in by the composition root
(gateway/app.py): a module gets the few callables it uses, never the whole gateway.

* :class:`Auth` — who is calling (a tenant by its key, the admin by its token) and the 401;
* :class:`Shed` — an answer with ``Retry-After``, counted in ``turbogate_shed_total`` by the
  rule behind it (sched/refusals.py) wherever the gateway sends one;
* :class:`ServeFn` / :class:`ProxyFn` — a request's life after the edge (gateway/serve.py) and
  the proxy routes' entry (gateway/edge.py), typed so a tracing wrapper chosen at build time
  (gateway/tracing.py) can stand in for either;
* :class:`AsgiHandler` — any raw-ASGI HTTP entry (the routes, as the jobs API calls them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from turbogate.asgi import Receive, Scope, Send, header, send_error
from turbogate.sched.refusals import refused_by

if TYPE_CHECKING:
    from prometheus_client import Counter

    from turbogate.gateway.runtime import TenantRt
    from turbogate.sched import FlowRequest
    from turbogate.sched.metering import LimitRefusal


class AsgiHandler(Protocol):
    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]: ...


class ProxyFn(Protocol):
    """The proxy routes' entry: a request checked at the edge and handed on."""

    def __call__(self, scope: Scope, receive: Receive, send: Send, kind: str, upstream_path: str) -> Awaitable[None]:
        ...


class ServeFn(Protocol):
    """A request's life as the flow directs it (``count``: False for a coalesced group's shared
    call; ``limit``: the tenant limits' verdict, the flow's input at arrival)."""

    def __call__(self, receive: Receive, send: Send, tenant: TenantRt, req: FlowRequest, body: bytes,
                 upstream_path: str, count: bool = True, limit: LimitRefusal | None = None) -> Awaitable[None]: ...


class Auth:
    """Who a request is from: a tenant by its bearer key, the admin by its token.
    ``tenant_of``: the tenant of an ``Authorization`` value (None: absent, not a bearer key,
    unknown), called as given (the proxy route asks it on every request)."""

    __slots__ = ("_is_admin", "tenant_of")

    def __init__(self, tenant_of: Callable[[bytes | None], TenantRt | None],
                 is_admin: Callable[[bytes], bool]) -> None:
        self.tenant_of = tenant_of
        self._is_admin = is_admin

    def tenant(self, scope: Scope) -> TenantRt | None:
        return self.tenant_of(header(scope, b"authorization"))

    def admin(self, scope: Scope) -> bool:
        auth = header(scope, b"authorization") or b""
        return auth[:7].lower() == b"bearer " and self._is_admin(auth[7:].strip())

    @staticmethod
    async def unauthorized(send: Send) -> None:
        await send_error(send, 401, "Incorrect or missing API key (send Authorization: Bearer <key>)",
                         code="invalid_api_key")

    @staticmethod
    async def not_admin(send: Send) -> None:
        await send_error(send, 401, "admin API needs Authorization: Bearer <admin token>", code="invalid_admin_token")


class Shed:
    """Answers with ``Retry-After``: each counted once in ``turbogate_shed_total{reason, tier, by}``
    (``by``: the rule, sched/refusals.py), so an operator sees every "come back later" the
    gateway gives, whichever route gave it."""

    __slots__ = ("counter",)

    def __init__(self, counter: Counter) -> None:
        self.counter = counter

    def count(self, code: str, tier: str = "-") -> None:
        self.counter.labels(code, tier, refused_by(code)).inc()

    async def refuse(self, send: Send, status: int, message: str, code: str, retry_after_s: int,
                     param: str | None = None) -> None:
        """Answer ``status`` with the OpenAI error and ``Retry-After``, counted (no tier: ``-``)."""
        self.count(code)
        await send_error(send, status, message, param=param, code=code,
                         headers=[(b"retry-after", str(retry_after_s).encode())])
