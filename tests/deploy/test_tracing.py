"""OpenTelemetry (the ``otel`` extra): a real gateway in front of a real emulator, both served by
uvicorn on 127.0.0.1, traced into the SDK's in-memory exporter.  The emulator's ASGI entry
records the headers it gets, to see the propagated ``traceparent`` arrive."""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from openai import OpenAI

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, wait_for
from turbogate.config import parse_config
from turbogate.emulator.server import build_app
from turbogate.gateway import tracing
from turbogate.gateway.app import GatewayApp
from turbogate.procs import free_port, wait_healthy

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (opentelemetry-sdk) is not installed")
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


class Recorder:
    """ASGI wrapper: the path and headers of every HTTP request the emulator gets."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, dict[str, str]]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append((scope["path"], {k.decode(): v.decode() for k, v in scope["headers"]}))
        await self.app(scope, receive, send)


def serve_in_thread(app: Any, port: int) -> tuple[threading.Thread, uvicorn.Server]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=asyncio.run, args=(server.serve(),), daemon=True)
    thread.start()
    return thread, server


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Recorder, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setenv(tracing.ENV, "1")
    monkeypatch.setattr(tracing, "_tracer", lambda: provider.get_tracer("test"))
    emulator = Recorder(build_app(gpu="H100-SXM", model=MODEL, time_scale=0.0, seed=1))
    emu_port, gw_port = free_port(), free_port()
    app = GatewayApp(parse_config(gateway_config([pool("p", [MODEL], [f"http://127.0.0.1:{emu_port}"])])))
    running = [serve_in_thread(emulator, emu_port)]
    try:
        wait_healthy(f"http://127.0.0.1:{emu_port}")  # up before the gateway's first scrape
        running.append(serve_in_thread(app, gw_port))
        wait_for(lambda: ready(f"http://127.0.0.1:{gw_port}"), what="gateway ready")
        yield f"http://127.0.0.1:{gw_port}", emulator, exporter
    finally:
        for thread, server in reversed(running):
            server.should_exit = True
            thread.join(timeout=30)


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def tree(exporter: InMemorySpanExporter, root: ReadableSpan) -> dict[str, ReadableSpan]:
    assert root.context is not None
    return {s.name: s for s in exporter.get_finished_spans()
            if s.parent is not None and s.parent.span_id == root.context.span_id}


def test_span_tree_and_traceparent_reach_the_engine(traced: tuple[str, Recorder, InMemorySpanExporter]) -> None:
    url, emulator, exporter = traced
    client = OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True,
        extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "x-turbogate-tier": "turbo"})
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    def roots() -> list[ReadableSpan]:
        return [s for s in exporter.get_finished_spans() if s.name == "turbogate.request"]

    wait_for(lambda: len(roots()) == 1, what="the request span")
    (root,) = roots()
    assert root.context is not None and root.parent is not None
    assert (f"{root.context.trace_id:032x}", f"{root.parent.span_id:016x}") == (CLIENT_TRACE, CLIENT_SPAN)
    attrs = dict(root.attributes or {})
    assert (attrs["turbogate.tenant"], attrs["turbogate.tier.asked"], attrs["turbogate.tier.served"]) == (
        "acme", "turbo", "turbo")
    assert attrs["http.response.status_code"] == 200 and attrs["turbogate.stream"] is True
    children = tree(exporter, root)
    assert set(children) == {"turbogate.l1_wait", "turbogate.l2_pick", "turbogate.upstream"}
    l1, l2, up = children["turbogate.l1_wait"], children["turbogate.l2_pick"], children["turbogate.upstream"]
    assert all(s.start_time is not None and s.end_time is not None for s in (l1, l2, up, root))
    # One timeline: L1's wait, then L2's pick, then the upstream call, all inside the request.
    assert l1.end_time == l2.start_time and l2.end_time == up.start_time
    assert up.end_time <= root.end_time  # type: ignore[operator]
    assert dict(up.attributes or {})["turbogate.ttft_s"] >= 0
    # The engine got the upstream span's context as its parent, in the same trace.
    engine_calls = [h for path, h in emulator.seen if path == "/v1/chat/completions"]
    assert len(engine_calls) == 1
    assert up.context is not None
    assert engine_calls[0]["traceparent"] == f"00-{CLIENT_TRACE}-{up.context.span_id:016x}-01"
    # Scrapes and probes of the engine are not traced.
    assert all("traceparent" not in h for path, h in emulator.seen if path != "/v1/chat/completions")


def test_a_request_without_traceparent_starts_a_trace(traced: tuple[str, Recorder, InMemorySpanExporter]) -> None:
    url, emulator, exporter = traced
    client = OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    wait_for(lambda: any(s.name == "turbogate.request" for s in exporter.get_finished_spans()), what="the span")
    root = next(s for s in exporter.get_finished_spans() if s.name == "turbogate.request")
    assert root.parent is None and root.context is not None
    assert dict(root.attributes or {})["turbogate.tier.served"] == "standard"
    up = tree(exporter, root)["turbogate.upstream"]
    assert "turbogate.ttft_s" not in (up.attributes or {})  # not a stream
    (headers,) = [h for path, h in emulator.seen if path == "/v1/chat/completions"]
    assert headers["traceparent"].split("-")[1] == f"{root.context.trace_id:032x}"


def test_off_by_default_the_app_is_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tracing.ENV, raising=False)
    assert tracing.from_env() is None
    app = GatewayApp(parse_config(gateway_config([pool("p", [MODEL], ["http://127.0.0.1:9"])])))
    # The routes call the edge and the edge the request's life directly: no tracing code between.
    assert app.routes.proxy == app.edge.proxy
    assert app.edge.serve == app.serving.serve
