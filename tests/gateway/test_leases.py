"""Turbo leases through a real gateway (gateway/leases.py): a real WebSocket client and HTTP on
127.0.0.1, the official openai client for the chat requests, and short configured lease times
so the schedule (active → warn → expired) plays out in a few seconds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.gateway.conftest import BASIC_KEY, KEY, MODEL, gateway_config, pool, wait_for
from turbogate.procs import Service, start_emulator

WARN_S, EXPIRE_S, PING_S = 1.0, 2.5, 0.2


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory,
       gateway_factory: Callable[[dict[str, Any]], Service]) -> Iterator[Service]:
    emu = start_emulator("--time-scale", "0", "--model", MODEL, "--seed", "4", log_dir=tmp_path_factory.mktemp("emu"))
    cfg = gateway_config([pool("main", [MODEL], [emu.url])],
                         leases={"warn_after_s": WARN_S, "expire_after_s": EXPIRE_S, "ping_interval_s": PING_S},
                         # HTTP read deadlines far shorter than a WebSocket's life do not close it.
                         limits={"header_timeout_s": 1.0, "body_timeout_s": 1.0})
    yield gateway_factory(cfg)
    emu.stop()


def auth(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def grant(gw: Service, key: str = KEY) -> httpx.Response:
    return httpx.post(gw.url + "/v1/turbo/leases", headers=auth(key), timeout=30)


def lease_state(gw: Service, lease_id: str) -> dict[str, Any]:
    state: dict[str, Any] = httpx.get(f"{gw.url}/v1/turbo/leases/{lease_id}", headers=auth(), timeout=30).json()
    return state


def chat(gw: Service, lease_id: str) -> tuple[str, str | None, str]:
    """The tier header, the downgrade header and the body's service_tier of one chat with the lease."""
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        extra_headers={"X-Turbogate-Lease": lease_id})
    body = raw.parse()
    return raw.headers["x-turbogate-tier"], raw.headers.get("x-turbogate-downgrade"), str(body.service_tier)


def ws_connect(gw: Service, lease_id: str) -> ClientConnection:
    return connect(gw.url.replace("http://", "ws://") + f"/v1/turbo/leases/{lease_id}/ws",
                   additional_headers=auth(), open_timeout=10)


def recv_json(ws: ClientConnection, timeout: float = 15.0) -> dict[str, Any]:
    message: dict[str, Any] = orjson.loads(ws.recv(timeout=timeout))
    return message


def test_only_a_tenant_entitled_to_turbo_gets_a_lease(gw: Service) -> None:
    resp = grant(gw, BASIC_KEY)
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "not_entitled"
    assert httpx.post(gw.url + "/v1/turbo/leases", timeout=30).status_code == 401
    lease = grant(gw).json()
    assert lease["state"] == "active" and lease["heartbeat"]["interval_s"] == PING_S
    assert 899 < lease["expires_in_s"] <= 900  # the default 15 min term
    assert httpx.get(f"{gw.url}/v1/turbo/leases/{lease['id']}", headers=auth(BASIC_KEY), timeout=30).status_code == 404


def test_a_lease_kept_by_websocket_serves_turbo_then_warns_expires_and_serves_standard(gw: Service) -> None:
    lease_id = grant(gw).json()["id"]
    assert chat(gw, lease_id) == ("turbo", None, "turbo")
    with ws_connect(gw, lease_id) as ws:
        assert recv_json(ws)["state"] == "active"  # the state, at once
        # Ping for longer than the expiry time: every answer says active, and the lease lives on.
        until = time.monotonic() + 1.5 * EXPIRE_S
        while time.monotonic() < until:
            ws.send('{"type": "ping"}')
            reply = recv_json(ws)
            while "renewed" not in reply:  # a state push (the machine stalled past warn) before the answer
                reply = recv_json(ws)
            assert reply["type"] == "lease" and reply["state"] == "active", reply
            time.sleep(PING_S)
        assert chat(gw, lease_id)[0] == "turbo"
        # Silence: the server tells the client warn, then expired, then closes with 4001.
        warn = recv_json(ws)
        assert warn["state"] == "warn" and warn["silent_s"] >= WARN_S
        expired = recv_json(ws)
        assert expired["state"] == "expired" and expired["reason"] == "no_heartbeat"
        assert expired["silent_s"] >= EXPIRE_S
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=15)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
    assert chat(gw, lease_id) == ("standard", "lease_expired", "standard")
    resp = httpx.post(f"{gw.url}/v1/turbo/leases/{lease_id}/heartbeat", headers=auth(), timeout=30)
    assert resp.status_code == 410 and resp.json()["error"]["code"] == "lease_expired"


def test_http_heartbeats_keep_a_lease_and_silence_expires_it(gw: Service) -> None:
    lease_id = grant(gw).json()["id"]
    for _ in range(3):
        beat = httpx.post(f"{gw.url}/v1/turbo/leases/{lease_id}/heartbeat", headers=auth(), timeout=30).json()
        assert beat["state"] == "active" and beat["renewed"] is False
        time.sleep(PING_S)
    wait_for(lambda: lease_state(gw, lease_id)["state"] == "expired", timeout=30, what="the lease to expire")
    state = lease_state(gw, lease_id)
    assert state["reason"] == "no_heartbeat" and state["silent_s"] >= EXPIRE_S and state["expires_in_s"] == 0


def test_an_unknown_lease_is_served_standard_and_refused_a_websocket(gw: Service) -> None:
    assert chat(gw, "lease_nope") == ("standard", "lease_unknown", "standard")
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(gw, "lease_nope")
    assert refused.value.response.status_code == 403


def test_a_websocket_client_that_leaves_costs_nothing(gw: Service) -> None:
    lease_id = grant(gw).json()["id"]
    for _ in range(3):
        with ws_connect(gw, lease_id) as ws:
            assert recv_json(ws)["state"] == "active"
            ws.send("ping")  # and gone without reading the answer
    beat = httpx.post(f"{gw.url}/v1/turbo/leases/{lease_id}/heartbeat", headers=auth(), timeout=30)
    assert beat.status_code == 200 and beat.json()["state"] == "active"
    assert "Traceback" not in gw.log_text() and "Exception in ASGI" not in gw.log_text()
