"""A served request leaves no reference cycle behind: reference counting frees its objects (the
flow's request, the shell's watch, the connection's request cycle) as it ends.  A cycle per
request left them all to the garbage collector, which then walked thousands of them at 32
connections: more CPU per request, though fewer instructions at one connection (issue 15).

The gateway runs in this process (uvicorn with the gateway's own protocol, in a thread), so
the test can count the objects that are still alive with the collector switched off."""

from __future__ import annotations

import asyncio
import gc
import threading

import openai
import pytest
import uvicorn

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, wait_for
from turbogate.config import parse_config
from turbogate.gateway.app import GatewayApp
from turbogate.gateway.cycle import LeanCycle
from turbogate.gateway.guard import GuardedHttpToolsProtocol
from turbogate.procs import free_port, start_emulator
from turbogate.sched import FlowRequest


def _alive(kind: type) -> int:
    return sum(1 for obj in gc.get_objects() if isinstance(obj, kind))


def test_a_served_request_leaves_nothing_for_the_garbage_collector(tmp_path_factory: pytest.TempPathFactory) -> None:
    emulator = start_emulator("--time-scale", "0", "--model", MODEL, log_dir=tmp_path_factory.mktemp("emu"))
    app = GatewayApp(parse_config(gateway_config([pool("p", [MODEL], [emulator.url])])))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning",
                                           http=GuardedHttpToolsProtocol))
    thread = threading.Thread(target=asyncio.run, args=(server.serve(),), daemon=True)
    thread.start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=30)
    msg = [{"role": "user", "content": "hi"}]
    try:
        wait_for(lambda: server.started, what="the gateway to start")
        for _ in range(3):  # warm-up: connections, lazily built state
            client.chat.completions.create(model=MODEL, messages=msg, max_tokens=4)
        gc.collect()
        gc.disable()  # from here only reference counting frees anything
        try:
            for i in range(40):
                answer = client.chat.completions.create(model=MODEL, messages=msg, max_tokens=4, stream=i % 2 == 1)
                if i % 2 == 1:
                    assert "".join(c.choices[0].delta.content or "" for c in answer if c.choices)  # type: ignore[union-attr]
            # The last request's own end runs just after its answer's last byte: poll, bounded.
            wait_for(lambda: _alive(FlowRequest) == 0, what="every request's objects freed without the collector")
            assert _alive(LeanCycle) <= 1  # the keep-alive connection's latest cycle, at most
        finally:
            gc.enable()
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=30)
        emulator.stop()
