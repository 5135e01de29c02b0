"""OpenTelemetry traces of the gateway's requests (the ``otel`` extra; off by default).

``TURBOGATE_OTEL=1`` turns it on.  :func:`from_env` then gives a :class:`Tracing`, and the
gateway is built with its wrappers around the proxy entry and the request's life, and its
replicas' clients traced once they exist; when tracing is off it gives None and the gateway is
built from the untraced parts alone, so tracing costs nothing unless it is on.

One request gives this span tree (times from the flow's own clock readings)::

    turbogate.request   (SERVER; the client's W3C traceparent continued if it sent one)
    ├── turbogate.l1_wait   arrival → dispatch (the L1 queue)
    ├── turbogate.l2_pick   dispatch → upstream send (L2's choice, handed to the request)
    └── turbogate.upstream  (CLIENT) one per attempt; its traceparent goes to the engine

with the tenant, tiers asked and served, pool, replica, model, status and TTFT as attributes.
Spans go to the global tracer provider when one is set (tests, an app embedding the gateway);
otherwise to one made here from ``OTEL_TRACES_EXPORTER`` (``otlp``, the default, ``console`` or
``none``) and the other standard ``OTEL_*`` variables.
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from turbogate.asgi import Message, Receive, Scope, Send
from turbogate.errors import ConfigError
from turbogate.httpclient import UpstreamPool, format_headers

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from turbogate.gateway.parts import ProxyFn, ServeFn
    from turbogate.gateway.runtime import ReplicaIO, TenantRt
    from turbogate.sched import FlowRequest
    from turbogate.sched.metering import LimitRefusal

log = logging.getLogger("turbogate.gateway.tracing")

ENV = "TURBOGATE_OTEL"
_ON = {"1", "true", "yes", "on"}
_current: contextvars.ContextVar[_Trace | None] = contextvars.ContextVar("turbogate_trace", default=None)


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in _ON


class _Trace:
    """One request's spans while it runs."""

    __slots__ = ("req", "root", "status", "upstream", "upstream_start")

    def __init__(self, root: Span) -> None:
        self.root = root
        self.req: FlowRequest | None = None
        self.status = 0
        self.upstream: Span | None = None
        self.upstream_start = 0.0


class Tracing:
    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry import propagate, trace

        self.tracer = tracer
        self._trace_api = trace
        self._propagate = propagate
        # perf_counter readings (the flow's clock) → epoch nanoseconds (OpenTelemetry's).
        self._offset_ns = time.time_ns() - time.perf_counter_ns()

    def ns(self, perf_s: float) -> int:
        return int(perf_s * 1e9) + self._offset_ns

    # ---- the wrappers ----------------------------------------------------------------------
    def wrap_proxy(self, proxy: ProxyFn) -> ProxyFn:
        async def traced(scope: Scope, receive: Receive, send: Send, kind: str, upstream_path: str) -> None:
            carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
            parent = self._propagate.extract(carrier)
            root = self.tracer.start_span("turbogate.request", context=parent, kind=self._trace_api.SpanKind.SERVER,
                                          attributes={"http.request.method": "POST", "url.path": scope["path"],
                                                      "turbogate.endpoint": kind})
            tr = _Trace(root)
            token = _current.set(tr)

            async def send_status(message: Message) -> None:
                if message["type"] == "http.response.start":
                    tr.status = message["status"]
                await send(message)

            try:
                await proxy(scope, receive, send_status, kind, upstream_path)
            except BaseException as exc:
                root.record_exception(exc)
                raise
            finally:
                _current.reset(token)
                self._finish(tr)

        return traced

    def wrap_serve(self, serve: ServeFn) -> ServeFn:
        async def traced(receive: Receive, send: Send, tenant: TenantRt, req: FlowRequest, body: bytes,
                         upstream_path: str, count: bool = True, limit: LimitRefusal | None = None) -> None:
            tr = _current.get()
            if tr is not None:
                tr.req = req
            await serve(receive, send, tenant, req, body, upstream_path, count, limit)

        return traced

    def trace_replicas(self, replicas: Iterable[ReplicaIO]) -> None:
        """Trace the upstream attempts through ``replicas``' clients (once they are made, at start-up)."""
        for io in replicas:
            for client in io.clients():  # the plain pool and any DSCP-marked ones
                self._wrap_client(client, io.state.id)

    def _wrap_client(self, client: UpstreamPool, replica: str) -> None:
        request = client.request

        async def traced(method: bytes, path: str, body: bytes = b"", content_type: bytes = b"application/json",
                         headers: bytes = b"", timeout_s: float | None = None) -> Any:
            tr = _current.get()
            if tr is None or method != b"POST":  # a scrape or a health probe, not a request's attempt
                return await request(method, path, body, content_type, headers, timeout_s)
            self._upstream_begins(tr, replica)
            carrier: dict[str, str] = {}
            assert tr.upstream is not None
            self._propagate.inject(carrier, context=self._trace_api.set_span_in_context(tr.upstream))
            return await request(method, path, body, content_type, headers + format_headers(carrier), timeout_s)

        client.request = traced  # type: ignore[method-assign]

    # ---- spans -----------------------------------------------------------------------------
    def _upstream_begins(self, tr: _Trace, replica: str) -> None:
        now = time.perf_counter()
        parent = self._trace_api.set_span_in_context(tr.root)
        req = tr.req
        if tr.upstream is not None:  # the previous attempt failed and the flow retries
            tr.upstream.set_attribute("turbogate.retried", True)
            tr.upstream.set_status(self._trace_api.StatusCode.ERROR, "retried on another replica")
            tr.upstream.end(self.ns(now))
        elif req is not None:  # the first attempt: L1's wait and L2's pick are over
            dispatched = req.dispatched_at or now
            self.tracer.start_span("turbogate.l1_wait", context=parent, start_time=self.ns(req.arrival),
                                   attributes={"turbogate.tier": req.served.value}).end(self.ns(dispatched))
            self.tracer.start_span("turbogate.l2_pick", context=parent, start_time=self.ns(dispatched),
                                   attributes={"turbogate.pool": req.pool, "turbogate.replica": replica}
                                   ).end(self.ns(now))
        tr.upstream = self.tracer.start_span("turbogate.upstream", context=parent,
                                             kind=self._trace_api.SpanKind.CLIENT, start_time=self.ns(now),
                                             attributes={"turbogate.replica": replica, "server.address": replica})
        tr.upstream_start = now

    def _finish(self, tr: _Trace) -> None:
        now = time.perf_counter()
        root, req = tr.root, tr.req
        parent = self._trace_api.set_span_in_context(root)
        if req is not None:
            root.set_attributes({
                "turbogate.tenant": req.tenant, "turbogate.tier.asked": req.asked.value,
                "turbogate.tier.served": req.served.value, "turbogate.pool": req.pool,
                "gen_ai.request.model": req.model, "turbogate.stream": req.stream})
            if req.downgrade is not None:
                root.set_attribute("turbogate.downgrade", req.downgrade)
            if tr.upstream is None:  # answered without an engine (shed, deadline): only L1's wait
                self.tracer.start_span("turbogate.l1_wait", context=parent, start_time=self.ns(req.arrival),
                                       attributes={"turbogate.tier": req.served.value}
                                       ).end(self.ns(req.dispatched_at or now))
        if tr.upstream is not None:
            if req is not None and req.first_byte_at is not None and req.stream:
                tr.upstream.set_attribute("turbogate.ttft_s", max(0.0, req.first_byte_at - tr.upstream_start))
            tr.upstream.end(self.ns(now))
        root.set_attribute("http.response.status_code", tr.status)
        if tr.status >= 500:
            root.set_status(self._trace_api.StatusCode.ERROR)
        root.end(self.ns(now))


def _tracer() -> Tracer:
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):  # one set already: use it
        return trace.get_tracer("turbogate.gateway")
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME",
                                                                                        "turbogate")}))
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if kind == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif kind == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError("OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http "
                              "(pip install 'turbogate[otel]')") from None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    elif kind != "none":
        raise ConfigError(f"OTEL_TRACES_EXPORTER={kind!r}: turbogate knows otlp, console and none")
    trace.set_tracer_provider(provider)
    return trace.get_tracer("turbogate.gateway")


def from_env() -> Tracing | None:
    """Tracing when ``TURBOGATE_OTEL`` is on; otherwise None (the gateway is built untraced)."""
    if not enabled():
        return None
    try:
        tracer = _tracer()
    except ImportError:
        raise ConfigError(f"{ENV} is on but OpenTelemetry is not installed (pip install 'turbogate[otel]')") from None
    log.info("OpenTelemetry tracing on")
    return Tracing(tracer)
