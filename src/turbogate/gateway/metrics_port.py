"""Who may read ``/metrics`` (it names tenants and their traffic): the optional bearer token
(config ``metrics.token_sha256``), and a port of its own (``metrics.port``) so it can stay off
the public listener — same guarded HTTP protocol, same token, nothing else served there."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from typing import TYPE_CHECKING

import uvicorn
from uvicorn.server import ServerState

from turbogate.asgi import Receive, Scope, Send, header, send_error
from turbogate.gateway.guard import GuardedHttpToolsProtocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from turbogate.config import GatewayConfig


class MetricsEndpoint:
    """``GET /metrics``: ``render``'s text, behind the metrics token (its sha256) when one is set."""

    def __init__(self, render: Callable[[], bytes], token_sha256: str | None) -> None:
        self.render = render
        self.token_sha256 = token_sha256

    async def serve(self, scope: Scope, send: Send) -> None:
        if self.token_sha256 is not None:
            auth = header(scope, b"authorization") or b""
            token = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(hashlib.sha256(token).hexdigest(), self.token_sha256):
                await send_error(send, 401, "/metrics needs Authorization: Bearer <metrics token>",
                                 code="invalid_metrics_token")
                return
        body = self.render()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _MetricsApp:
    def __init__(self, endpoint: MetricsEndpoint, config: GatewayConfig) -> None:
        self.endpoint = endpoint
        self.config = config  # the guard reads its limits here

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            await send_error(send, 404, f"no route {scope['path']} (this port serves /metrics)", code="not_found")
        elif scope["method"] not in ("GET", "HEAD"):
            await send_error(send, 405, "/metrics takes GET", code="method_not_allowed",
                             headers=[(b"allow", b"GET, HEAD")])
        else:
            await self.endpoint.serve(scope, send)


class MetricsServer:
    def __init__(self, endpoint: MetricsEndpoint, config: GatewayConfig, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.config = uvicorn.Config(_MetricsApp(endpoint, config), host=host, port=port, lifespan="off",
                                     http=GuardedHttpToolsProtocol, proxy_headers=False, access_log=False,
                                     log_level="warning", server_header=False, date_header=False)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        config = self.config
        config.load()
        state = ServerState()

        def protocol() -> asyncio.Protocol:
            return GuardedHttpToolsProtocol(config=config, server_state=state, app_state={})

        self._server = await asyncio.get_running_loop().create_server(protocol, self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
