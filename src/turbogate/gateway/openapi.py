"""``GET /openapi.json``: the gateway's own routes and the OpenAI routes it serves (OpenAPI 3.0),
written by hand from what app.py and admin.py accept, so the fuzz suite (tests/fuzz) can drive
them.  Request schemas describe what the gateway itself checks; other fields pass through to
the engine unchanged."""

from __future__ import annotations

from typing import Any

import orjson

from turbogate.config import GatewayConfig

_ERROR = {"$ref": "#/components/schemas/Error"}
_TIER_WORDS = ["priority", "turbo", "default", "auto", "standard", "flex", "relax"]


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _answers(ok: str, *errors: int, ok_schema: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"200": {"description": ok, **(_json(ok_schema) if ok_schema else {})}}
    for code in errors:
        out[str(code)] = {"description": "OpenAI error", **_json(_ERROR)}
    return out


def _completion_body(config: GatewayConfig, field: str, field_schema: dict[str, Any],
                     stream: bool = True) -> dict[str, Any]:
    models = [m for p in config.pools for m in p.models]
    props: dict[str, Any] = {
        "model": {"type": "string", "enum": models},
        field: field_schema,
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": config.limits.max_tokens},
        "service_tier": {"type": "string", "enum": _TIER_WORDS},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "user": {"type": "string"},
    }
    if stream:
        props["stream"] = {"type": "boolean"}
    return {"required": True, **_json({"type": "object", "required": ["model", field], "properties": props})}


def _post(summary: str, body: dict[str, Any], op: str) -> dict[str, Any]:
    return {"post": {"operationId": op, "summary": summary, "security": [{"apiKey": []}], "requestBody": body,
                     "responses": _answers("the engine's answer (JSON, or SSE when stream is true)",
                                           400, 401, 404, 413, 429, 502, 503, 504)}}


def _get(summary: str, op: str, *errors: int, auth: str | None = None, content: str = "application/json",
         schema: dict[str, Any] | None = None) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": summary, "content": {content: {"schema": schema or {"type": "object"}}}}
    responses: dict[str, Any] = {"200": ok}
    for code in errors:
        responses[str(code)] = {"description": "error", **_json(_ERROR)}
    get: dict[str, Any] = {"operationId": op, "summary": summary, "responses": responses}
    if auth is not None:
        get["security"] = [{auth: []}]
    return {"get": get}


def _admin_post(summary: str, op: str, param: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"post": {
        "operationId": op, "summary": summary, "security": [{"admin": []}],
        "parameters": [{"name": param, "in": "path", "required": True, "schema": {"type": "string"}}],
        "requestBody": {"required": True, **_json({"type": "object", "additionalProperties": False,
                                                   "required": list(body), "properties": body})},
        "responses": _answers("the switch as set", 400, 401, 404, 413)}}


def _op(method: str, summary: str, op: str, ok: str, *errors: int, param: str | None = None,
        body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One operation of the job and lease routes (bearer API key; ``param`` a path parameter)."""
    out: dict[str, Any] = {"operationId": op, "summary": summary, "security": [{"apiKey": []}],
                           "responses": {ok: {"description": summary, **_json({"type": "object"})},
                                         **{str(c): {"description": "OpenAI error", **_json(_ERROR)} for c in errors}}}
    if param is not None:
        out["parameters"] = [{"name": param, "in": "path", "required": True, "schema": {"type": "string"}}]
    if body is not None:
        out["requestBody"] = {"required": True, **_json(body)}
    return {method: out}


def _jobs_and_leases(config: GatewayConfig) -> dict[str, Any]:
    """L4 job graphs (gateway/jobs.py) and Turbo leases (gateway/leases.py)."""
    models = [m for p in config.pools for m in p.models]
    request = {"type": "object", "required": ["model", "messages"], "properties": {
        "model": {"type": "string", "enum": models}, "max_tokens": {"type": "integer", "minimum": 1, "maximum": 64},
        "messages": {"type": "array", "minItems": 1, "items": {"type": "object"}}}}
    step = {"type": "object", "required": ["id", "request"], "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}, "request": request,
        "depends_on": {"type": "array", "items": {"type": "string"}},
        "inputs": {"type": "object", "additionalProperties": {"type": "string"}}}}
    job = {"type": "object", "required": ["steps"], "properties": {
        "service_tier": {"type": "string", "enum": _TIER_WORDS},
        "steps": {"type": "array", "minItems": 1, "maxItems": config.jobs.max_steps, "items": step}}}
    lease = "/v1/turbo/leases/{id}"
    return {
        "/v1/jobs": _op("post", "start a job graph (L4)", "job_create", "202", 400, 401, 413, 429, body=job),
        # 503: a job run by another worker while the store that shares jobs is unreachable.
        "/v1/jobs/{id}": {**_op("get", "a job's status and each step's output", "job_get", "200", 401, 404, 503,
                                param="id"),
                          **_op("delete", "cancel what has not run", "job_cancel", "200", 401, 404, 503,
                                param="id")},
        "/v1/turbo/leases": _op("post", "grant a Turbo lease", "lease_grant", "201", 401, 403, 429),
        lease: _op("get", "a lease's state", "lease_get", "200", 401, 404, param="id"),
        lease + "/heartbeat": _op("post", "keep a lease alive", "lease_heartbeat", "200", 401, 404, 410, param="id"),
        # A WebSocket (OpenAPI 3.0 has no word for one): the handshake is a GET with Upgrade; a
        # plain GET is answered 426.  Every message is a heartbeat, answered with the lease's
        # state; messages and connections are capped (limits.ws_*, docs/gateway.md).
        lease + "/ws": {"get": {
            "operationId": "lease_ws", "summary": "heartbeats over a WebSocket (Upgrade: websocket)",
            "security": [{"apiKey": []}],
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"101": {"description": "switching to the WebSocket protocol"},
                          **{str(c): {"description": "OpenAI error", **_json(_ERROR)} for c in (401, 426)}}}},
    }


def _budget_ops() -> dict[str, Any]:
    """``POST`` and ``PUT /admin/budgets/{tenant}``: the same operation under both methods."""
    post = _admin_post("set a tenant's Turbo budget", "admin_budget", "tenant", {
        "turbo_budget_units": {"type": "number", "minimum": 0, "nullable": True},
        "period": {"type": "string", "enum": ["hour", "day", "week", "month"]}})["post"]
    return {"post": post, "put": {**post, "operationId": "admin_budget_put"}}


def document(config: GatewayConfig) -> dict[str, Any]:
    message = {"type": "object", "required": ["role", "content"],
               "properties": {"role": {"type": "string", "enum": ["system", "user", "assistant"]},
                              "content": {"type": "string"}}}
    text = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}
    metrics_auth = "metrics" if config.metrics.token_sha256 else None
    paths: dict[str, Any] = {
        "/v1/chat/completions": _post("Chat completion (OpenAI)", _completion_body(
            config, "messages", {"type": "array", "minItems": 1, "items": message}), "chat"),
        "/v1/completions": _post("Text completion (OpenAI)", _completion_body(config, "prompt", text), "completions"),
        "/v1/embeddings": _post("Embeddings (OpenAI)", _completion_body(config, "input", text, stream=False),
                                "embeddings"),
        "/v1/models": _get("the models served", "models", 401, auth="apiKey"),
        "/health": _get("the process is up", "health"),
        "/ready": {"get": {"operationId": "ready", "summary": "every pool has a healthy replica",
                           "responses": {"200": {"description": "ready", **_json({"type": "object"})},
                                         "503": {"description": "not ready", **_json({"type": "object"})}}}},
        "/openapi.json": _get("this document", "openapi"),
        "/admin/state": _get("switches, queues, replicas", "admin_state", 401, auth="admin"),
        "/admin/events": _get("the knee guards' state changes and why", "admin_events", 401, auth="admin"),
        "/admin/pools/{pool}/guard": _admin_post("pin a pool's knee guard, or hand it back (null)", "admin_guard",
                                                 "pool", {"state": {"type": "string", "nullable": True,
                                                                    "enum": ["open", "capped", "closed", None]}}),
        "/admin/tiers/{tier}": _admin_post("switch Turbo or Relax on or off", "admin_tier", "tier",
                                           {"enabled": {"type": "boolean"}}),
        "/admin/tenants/{name}": _admin_post("switch one tenant's Turbo", "admin_tenant", "name",
                                             {"turbo_enabled": {"type": "boolean"}}),
        # docs/metering.md: start, end, group_by and format are query parameters
        "/v1/usage": _get("the caller's usage (JSON or CSV)", "usage", 400, 401, 503, auth="apiKey"),
        "/admin/usage": _get("every tenant's usage (JSON or CSV)", "admin_usage", 400, 401, 503, auth="admin"),
        "/admin/budgets": _get("Turbo budgets and spend", "admin_budgets", 401, auth="admin"),
        "/admin/budgets/{tenant}": _budget_ops(),
    }
    paths.update(_jobs_and_leases(config))
    if config.metrics.port is None:
        paths["/metrics"] = _get("Prometheus metrics", "metrics", *((401,) if metrics_auth else ()),
                                 auth=metrics_auth, content="text/plain", schema={"type": "string"})
    schemes: dict[str, Any] = {"apiKey": {"type": "http", "scheme": "bearer"},
                               "admin": {"type": "http", "scheme": "bearer"}}
    if metrics_auth:
        schemes["metrics"] = {"type": "http", "scheme": "bearer"}
    error = {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": "string", "nullable": True}, "code": {"type": "string", "nullable": True}}}}}
    return {"openapi": "3.0.3", "info": {"title": "turbogate", "version": "1"}, "paths": paths,
            "components": {"securitySchemes": schemes, "schemas": {"Error": error}}}


def openapi_document(config: GatewayConfig) -> bytes:
    return orjson.dumps(document(config))
