"""The proxy routes' edge (``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``):
the key, the body and its fields checked, then the flow asked to open the request.

Bad input gets a 4xx in the OpenAI error shape naming the field, and is counted and metered like
any answer; what the request then gets — its tier, queue, replica, retries, deadline — is the
flow's to decide (sched/flow.py), carried out by gateway/serve.py.  A body is re-encoded only
when something in it must change (``service_tier`` out, ``priority`` or the stream's usage
request in): a request passed through as it came costs no JSON encoding.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson

from turbogate.asgi import BodyTooLarge, Receive, Scope, Send, read_body, send_error
from turbogate.gateway import leases
from turbogate.gateway.cycle import whole_body
from turbogate.gateway.regions import SESSION_HEADER, BadHeader, session_of
from turbogate.gateway.runtime import TenantRt
from turbogate.sched import Flow, Respond

if TYPE_CHECKING:
    from turbogate.gateway.coalesce import Coalescing
    from turbogate.gateway.lease_share import SharedLeases
    from turbogate.gateway.metering import Metering
    from turbogate.gateway.metrics import GatewayMetrics
    from turbogate.gateway.parts import Auth, ServeFn
    from turbogate.gateway.regions import ClientRegions

_REQUIRED = {"chat": "messages", "completions": "prompt", "embeddings": "input"}
_MAX_DEPTH = 254  # orjson's encoder limit: a body re-encoded (service_tier, priority) may nest no deeper


class Edge:
    """The proxy routes' checks; :meth:`proxy` is the gateway's ``ProxyFn`` (gateway/parts.py),
    handing a checked request to ``serve`` (or to coalescing, which calls ``serve`` itself)."""

    def __init__(self, flow: Flow, auth: Auth, metrics: GatewayMetrics, meter: Metering,
                 client_regions: ClientRegions, lease_share: SharedLeases, coalescing: Coalescing | None,
                 serve: ServeFn, max_body: int) -> None:
        self.flow = flow
        self.auth = auth
        self.metrics = metrics
        self.meter = meter
        self.client_regions = client_regions
        self.lease_share = lease_share
        self.coalescing = coalescing
        self.serve = serve
        self.max_body = max_body

    async def refuse(self, send: Send, tenant: TenantRt, status: int, message: str, param: str | None,
                     code: str) -> None:
        """A bad request from a known tenant: counted, metered and answered with the OpenAI error."""
        self.metrics.count(tenant.label, "-", "-", status)
        self.meter.record_edge(tenant.name, status, "-", "-", time.perf_counter())
        await send_error(send, status, message, param=param, code=code)

    async def proxy(self, scope: Scope, receive: Receive, send: Send, kind: str, upstream_path: str) -> None:
        """Check one proxied request and hand it to ``serve`` (or to coalescing)."""
        arrival = time.perf_counter()
        # Every header this route reads, in one pass (the first of a repeated name, as header() does).
        headers: dict[bytes, bytes] = dict(reversed(scope["headers"]))
        tenant = self.auth.tenant_of(headers.get(b"authorization"))
        if tenant is None:
            self.metrics.count("-", "-", "-", 401)
            await self.auth.unauthorized(send)
            return
        max_body = self.max_body
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > max_body:
            await self.refuse(send, tenant, 413, f"request body is {int(length)} bytes, over the limit of {max_body}",
                              None, "body_too_large")
            return
        body = whole_body(receive)  # the usual request: its body came with its headers (no coroutine)
        try:
            if body is None:
                body = await read_body(receive, max_body)
            elif len(body) > max_body:
                raise BodyTooLarge
        except BodyTooLarge:
            await self.refuse(send, tenant, 413, f"request body is over the limit of {max_body} bytes", None,
                              "body_too_large")
            return
        if body is None:
            return
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            await self.refuse(send, tenant, 400, f"request body is not valid JSON: {exc}", None, "invalid_json")
            return
        if not isinstance(obj, dict):
            await self.refuse(send, tenant, 400, "request body must be a JSON object", None, "invalid_json")
            return
        model = obj.get("model")
        if not isinstance(model, str) or not model:
            await self.refuse(send, tenant, 400, "you must provide a model parameter (a string)", "model",
                              "missing_required_parameter")
            return
        field = _REQUIRED[kind]
        value = obj.get(field)
        if value is None or (kind == "chat" and (not isinstance(value, list) or not value)):
            await self.refuse(send, tenant, 400, f"'{field}' is required" + (" (a non-empty list)" if kind == "chat"
                              else ""), field, "missing_required_parameter")
            return
        stream = obj.get("stream", False)
        if not isinstance(stream, bool) or (stream and kind == "embeddings"):
            await self.refuse(send, tenant, 400, "'stream' must be true or false (and false for embeddings)", "stream",
                              "invalid_value")
            return
        tier_header = headers.get(b"x-turbogate-tier")
        # The usual request sends none of the region, session and lease headers: no call for those.
        regions = self.client_regions
        region_raw, session_raw = headers.get(regions.header), headers.get(SESSION_HEADER)
        client_region = session = None
        try:
            if region_raw is not None or regions.reader is not None:
                client_region = regions.region_of(region_raw, scope)
            if session_raw is not None:
                session = session_of(session_raw)
        except BadHeader as exc:
            await self.refuse(send, tenant, 400, str(exc), exc.name, "invalid_value")
            return
        tokens_field = "max_tokens" if obj.get("max_tokens") is not None else "max_completion_tokens"
        lease_raw = headers.get(leases.LEASE_HEADER)
        lease_id = None if lease_raw is None else leases.lease_of(lease_raw)
        if lease_id is not None:  # the lease may have been granted or kept alive through another process
            await self.lease_share.refresh(lease_id, arrival)
        req = self.flow.open(
            tenant=tenant.name, model=model, tier_body=obj.get("service_tier"),
            tier_header=None if tier_header is None else tier_header.decode("latin-1"),
            max_tokens=obj.get(tokens_field), max_tokens_field=tokens_field, prompt_bytes=len(body),
            stream=stream, now=arrival, lease=lease_id, client_region=client_region,
            session=session)
        if isinstance(req, Respond):
            await self.refuse(send, tenant, req.status, req.message, req.param, req.code)
            return
        if self.meter.ask_stream_usage(obj, req) or "service_tier" in obj or req.priority is not None:
            obj.pop("service_tier", None)
            if req.priority is not None:
                obj["priority"] = req.priority
            try:
                body = orjson.dumps(obj)
            except orjson.JSONEncodeError:  # orjson decodes 1,024 levels of nesting but encodes only 254
                await self.refuse(send, tenant, 400, f"request body nests deeper than {_MAX_DEPTH} levels", None,
                                  "invalid_json")
                return
        # The tenant's global limits, counted in the store across every gateway, before the request
        # may lead or follow a shared call: a follower spends the tenant's rate like any request.
        meter = self.meter
        limit = await meter.admit(req) if req.tenant in meter.limits else None
        coalescing = self.coalescing
        if coalescing is not None and limit is None:  # an identical deterministic request may be under way
            decision = coalescing.decide(upstream_path, tenant, req, meter.key_body(obj, req))
            if decision is not None:
                await coalescing.serve(decision, send, receive, tenant, req, body, upstream_path)
                return
        await self.serve(receive, send, tenant, req, body, upstream_path, limit=limit)
