"""Per-tier DSCP marking through a real gateway: a Turbo request to a real emulator travels on a
connection whose socket says IP_TOS = EF, a Standard one (and the scrapes) on unmarked ones.
The gateway runs in this process (uvicorn in a thread) so the test can read its sockets back."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import openai
import pytest
import uvicorn

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, wait_for
from turbogate.config import parse_config
from turbogate.gateway.app import GatewayApp
from turbogate.httpclient import UpstreamPool
from turbogate.procs import Service, free_port, start_emulator
from turbogate.sched import Tier

EF = 46 << 2  # 0xb8


@pytest.fixture(scope="module")
def marked_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayApp, str]]:
    emulator: Service = start_emulator("--time-scale", "0", "--model", MODEL, log_dir=tmp_path_factory.mktemp("emu"))
    app = GatewayApp(parse_config(gateway_config([pool("p", [MODEL], [emulator.url])],
                                                 tiers={"turbo": {"dscp": "EF"}, "relax": {"dscp": 46}})))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=asyncio.run, args=(server.serve(),), daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, what="the gateway to start")
        yield app, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        emulator.stop()


def _marks(client: UpstreamPool) -> set[int]:
    """The DSCP bits of IP_TOS on every idle connection of ``client`` (read from the sockets)."""
    marks = set()
    for conn in list(client._idle):
        if conn.transport is not None and not conn.closed:
            sock = conn.transport.get_extra_info("socket")
            marks.add(sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) & 0xFC)
    return marks


def test_turbo_travels_marked_standard_and_scrapes_unmarked(marked_gateway: tuple[GatewayApp, str]) -> None:
    app, url = marked_gateway
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=30)
    msg = [{"role": "user", "content": "hi"}]
    turbo = client.chat.completions.create(model=MODEL, messages=msg, max_tokens=4, service_tier="priority")
    assert turbo.service_tier == "turbo"
    standard = client.chat.completions.create(model=MODEL, messages=msg, max_tokens=4)
    assert standard.service_tier == "standard"
    (io,) = app.rt.replicas.values()
    turbo_pool, plain = io.client_for(Tier.TURBO), io.client
    assert turbo_pool is not None and plain is not None and turbo_pool is not plain
    assert io.client_for(Tier.RELAX) is turbo_pool  # the same mark: one shared pool
    assert io.client_for(Tier.STANDARD) is plain
    # Each connection goes back to its pool just after the answer's last byte: poll, bounded.
    wait_for(lambda: _marks(turbo_pool) == {EF}, what="the Turbo connection back in its pool, marked EF")
    wait_for(lambda: _marks(plain) == {0}, what="the Standard (and scrape) connections, unmarked")
