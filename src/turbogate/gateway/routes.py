"""The gateway's routes: which part of the gateway answers a request, by its path and method.

A module of its own so a compiled build (setup.py) runs the dispatch every request passes
through as C; :meth:`Routes.handle_http` is the gateway's HTTP entry.  The proxy routes go to
``proxy`` (gateway/edge.py's, or tracing's wrapper of it: chosen when the gateway is built).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from turbogate.asgi import BodyTooLarge, Receive, Scope, Send, send_bytes, send_error
from turbogate.gateway import admin, leases, usage_api
from turbogate.gateway.conformance import method_not_allowed

if TYPE_CHECKING:
    from turbogate.gateway.admin import AdminApi
    from turbogate.gateway.jobs import JobsApi
    from turbogate.gateway.leases import LeasesApi
    from turbogate.gateway.metrics_port import MetricsEndpoint
    from turbogate.gateway.parts import Auth, ProxyFn
    from turbogate.gateway.usage_api import UsageApi
    from turbogate.sched import Flow
    from turbogate.store.resilient import ResilientStore

log = logging.getLogger("turbogate.gateway")

ENDPOINTS = {
    "/v1/chat/completions": ("chat", "/v1/chat/completions"),
    "/v1/completions": ("completions", "/v1/completions"),
    "/v1/embeddings": ("embeddings", "/v1/embeddings"),
}
_GET_ROUTES = frozenset({"/health", "/ready", "/metrics", "/v1/models", "/openapi.json"})


class Routes:
    """Each route's part, by path and method.  ``metrics``: None where ``/metrics`` has a port of
    its own (gateway/metrics_port.py)."""

    def __init__(self, proxy: ProxyFn, auth: Auth, flow: Flow, store: ResilientStore, jobs: JobsApi,
                 leases: LeasesApi, usage: UsageApi, admin: AdminApi, metrics: MetricsEndpoint | None,
                 models_body: bytes, openapi_body: bytes, max_body: int) -> None:
        self.proxy = proxy
        self.auth = auth
        self.flow = flow
        self.store = store
        self.jobs = jobs
        self.leases = leases
        self.usage = usage
        self.admin = admin
        self.metrics = metrics
        self.models_body = models_body
        self.openapi_body = openapi_body
        self.max_body = max_body

    async def handle_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request (the gateway's HTTP entry)."""
        path: str = scope["path"]
        method: str = scope["method"]
        endpoint = ENDPOINTS.get(path)
        if endpoint is not None:
            if method != "POST":
                await method_not_allowed(send, path, "POST")
                return
            try:
                await self.proxy(scope, receive, send, endpoint[0], endpoint[1])
            except Exception:  # a bug, not bad input: answer in the OpenAI shape, keep the server up
                log.exception("internal error on %s", path)  # the scope's headers (keys) are not logged
                with contextlib.suppress(Exception):  # fails harmlessly if the answer had started
                    await send_error(send, 500, "internal gateway error", code="internal_error")
            return
        try:  # every other route reads its body with read_body: over its limit, one 413 here
            await self._other(scope, receive, send, path, method)
        except BodyTooLarge:
            limit = admin.body_limit(self.max_body) if path.startswith("/admin/") else self.max_body
            await send_error(send, 413, f"request body is over the limit of {limit} bytes", code="body_too_large")
        except Exception:  # a bug, not bad input: the OpenAI shape, never a bare traceback
            log.exception("internal error on %s", path)
            with contextlib.suppress(Exception):
                await send_error(send, 500, "internal gateway error", code="internal_error")

    async def _other(self, scope: Scope, receive: Receive, send: Send, path: str, method: str) -> None:
        if usage_api.handles(path):
            await self.usage.handle(scope, receive, send)
        elif path.startswith("/v1/jobs"):  # L4 job graphs
            await self.jobs.handle(scope, receive, send)
        elif path.startswith(leases.PREFIX):  # Turbo leases
            await self.leases.handle(scope, receive, send)
        elif path.startswith("/admin/"):
            await self.admin.handle(scope, receive, send)
        elif path in _GET_ROUTES and not (path == "/metrics" and self.metrics is None):
            if method not in ("GET", "HEAD"):
                await method_not_allowed(send, path, "GET", "HEAD")
                return
            await self._get(scope, send, path)
        else:
            await send_error(send, 404, f"no route {path}", code="not_found")

    async def _get(self, scope: Scope, send: Send, path: str) -> None:
        if path == "/health":
            await send_bytes(send, 200, b'{"status":"ok"}')
        elif path == "/ready":
            flow = self.flow
            picker = flow.picker  # ready while every model has a healthy pool (L3 fails over)
            ready = all(any(picker.healthy(p) > 0 for p in pools) for pools in flow.pools_of_model.values())
            body = b'{"ready":true}' if ready else b'{"ready":false}'
            if self.store.degraded:  # still serving, within local limits, usage buffered on disk
                body = body[:-1] + b',"status":"degraded","store":"unreachable"}'
            await send_bytes(send, 200 if ready else 503, body)
        elif path == "/metrics":
            assert self.metrics is not None
            await self.metrics.serve(scope, send)
        elif path == "/openapi.json":
            await send_bytes(send, 200, self.openapi_body)
        elif self.auth.tenant(scope) is None:  # /v1/models
            await self.auth.unauthorized(send)
        else:
            await send_bytes(send, 200, self.models_body)
