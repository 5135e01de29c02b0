"""The gateway's routes: which part of the gateway answers a request, by its path and method.

A module of its own so a compiled build (setup.py) runs the dispatch every request passes
through as C; ``GatewayApp.handle_http`` is :func:`handle_http`.  The proxy routes go to the
edge (``app._proxy``, gateway/edge.py), looked up on the app so tracing can wrap it.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from turbogate.asgi import BodyTooLarge, Receive, Scope, Send, send_bytes, send_error
from turbogate.gateway import admin, leases, usage_api
from turbogate.gateway.conformance import method_not_allowed
from turbogate.gateway.metrics_port import serve_metrics

if TYPE_CHECKING:
    from turbogate.gateway.app import GatewayApp

log = logging.getLogger("turbogate.gateway")

ENDPOINTS = {
    "/v1/chat/completions": ("chat", "/v1/chat/completions"),
    "/v1/completions": ("completions", "/v1/completions"),
    "/v1/embeddings": ("embeddings", "/v1/embeddings"),
}
_GET_ROUTES = frozenset({"/health", "/ready", "/metrics", "/v1/models", "/openapi.json"})


async def handle_http(app: GatewayApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer one HTTP request (the app's ``handle_http``)."""
    path: str = scope["path"]
    method: str = scope["method"]
    endpoint = ENDPOINTS.get(path)
    if endpoint is not None:
        if method != "POST":
            await method_not_allowed(send, path, "POST")
            return
        try:
            await app._proxy(scope, receive, send, endpoint[0], endpoint[1])
        except Exception:  # a bug, not bad input: answer in the OpenAI shape, keep the server up
            log.exception("internal error on %s", path)  # the scope's headers (keys) are not logged
            with contextlib.suppress(Exception):  # fails harmlessly if the answer had started
                await send_error(send, 500, "internal gateway error", code="internal_error")
        return
    try:  # every other route reads its body with read_body: over its limit, one 413 here
        await _other(app, scope, receive, send, path, method)
    except BodyTooLarge:
        limit = admin.body_limit(app) if path.startswith("/admin/") else app.max_body
        await send_error(send, 413, f"request body is over the limit of {limit} bytes", code="body_too_large")
    except Exception:  # a bug, not bad input: the OpenAI shape, never a bare traceback
        log.exception("internal error on %s", path)
        with contextlib.suppress(Exception):
            await send_error(send, 500, "internal gateway error", code="internal_error")


async def _other(app: GatewayApp, scope: Scope, receive: Receive, send: Send, path: str, method: str) -> None:
    if usage_api.handles(path):
        await usage_api.handle(app, scope, receive, send)
    elif path.startswith("/v1/jobs"):  # L4 job graphs
        await app.jobs.handle(scope, receive, send)
    elif path.startswith(leases.PREFIX):  # Turbo leases
        await leases.handle(app, scope, receive, send)
    elif path.startswith("/admin/"):
        await admin.handle(app, scope, receive, send)
    elif path in _GET_ROUTES and not (path == "/metrics" and app.metrics_port is not None):
        if method not in ("GET", "HEAD"):
            await method_not_allowed(send, path, "GET", "HEAD")
            return
        await _get(app, scope, send, path)
    else:
        await send_error(send, 404, f"no route {path}", code="not_found")


async def _get(app: GatewayApp, scope: Scope, send: Send, path: str) -> None:
    if path == "/health":
        await send_bytes(send, 200, b'{"status":"ok"}')
    elif path == "/ready":
        flow = app.rt.flow
        picker = flow.picker  # ready while every model has a healthy pool (L3 fails over)
        ready = all(any(picker.healthy(p) > 0 for p in pools) for pools in flow.pools_of_model.values())
        body = b'{"ready":true}' if ready else b'{"ready":false}'
        if app.meter.store.degraded:  # still serving, within local limits, usage buffered on disk
            body = body[:-1] + b',"status":"degraded","store":"unreachable"}'
        await send_bytes(send, 200 if ready else 503, body)
    elif path == "/metrics":
        await serve_metrics(app, scope, send)
    elif path == "/openapi.json":
        await send_bytes(send, 200, app.openapi_body)
    elif app._tenant(scope) is None:  # /v1/models
        await app._unauthorized(send)
    else:
        await send_bytes(send, 200, app.models_body)
