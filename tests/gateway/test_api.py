"""The edge through a real gateway to real emulators, with the official openai client."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import (
    ADMIN,
    BASIC_KEY,
    KEY,
    MODEL,
    TINY_KEY,
    admin_state,
    gateway_config,
    pool,
    server_timing,
    wait_for,
)
from turbogate.procs import Service, start_emulator

SLOW = "slow-model"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Service]]:
    logs = tmp_path_factory.mktemp("emu")
    fast = start_emulator("--time-scale", "0", "--model", MODEL, "--seed", "1", log_dir=logs)
    slow = start_emulator("--time-scale", "1", "--model", MODEL, "--served-model-name", SLOW, "--seed", "2",
                          log_dir=logs)
    yield {"fast": fast, "slow": slow}
    fast.stop()
    slow.stop()


@pytest.fixture(scope="module")
def gw(fleet: dict[str, Service], gateway_factory: Callable[[dict[str, Any]], Service]) -> Service:
    cfg = gateway_config(
        [pool("fast", [MODEL], [fleet["fast"].url]), pool("slow", [SLOW], [fleet["slow"].url])],
        tiers={"relax": {"deadline_s": 0.5}},
        limits={"max_body_bytes": 4096},
    )
    return gateway_factory(cfg)


def client(gw: Service, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=30)


def raw(gw: Service, body: bytes | str, key: str = KEY, path: str = "/v1/chat/completions",
        headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(gw.url + path, content=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                               **(headers or {})})


MSG = [{"role": "user", "content": "Hello there"}]


def test_chat_names_the_tier_and_where_time_went(gw: Service) -> None:
    resp = client(gw).chat.completions.with_raw_response.create(
        model=MODEL, messages=MSG, max_tokens=8, service_tier="priority")
    completion = resp.parse()
    assert completion.choices[0].message.content
    assert completion.service_tier == "turbo"
    assert resp.headers["x-turbogate-tier"] == "turbo"
    timing = server_timing(resp.headers["server-timing"])
    assert set(timing) == {"l1", "l2", "upstream"} and all(v >= 0 for v in timing.values())


def test_default_tier_and_header_tier(gw: Service) -> None:
    assert client(gw).chat.completions.create(model=MODEL, messages=MSG, max_tokens=4).service_tier == "standard"
    c = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0,
                      default_headers={"X-Turbogate-Tier": "flex"})
    assert c.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4).service_tier == "relax"


def test_tenant_not_entitled_to_turbo_is_served_standard(gw: Service) -> None:
    resp = client(gw, BASIC_KEY).chat.completions.with_raw_response.create(
        model=MODEL, messages=MSG, max_tokens=4, service_tier="priority")
    assert resp.parse().service_tier == "standard"
    assert resp.headers["x-turbogate-tier"] == "standard"


def test_completions(gw: Service) -> None:
    out = client(gw).completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6,
                                        extra_body={"service_tier": "flex"})
    assert out.choices[0].text
    assert out.service_tier == "relax"  # type: ignore[attr-defined]


def test_streaming_with_usage_tags_every_chunk(gw: Service) -> None:
    with client(gw).chat.completions.with_streaming_response.create(
        model=MODEL, messages=MSG, max_tokens=12, stream=True, stream_options={"include_usage": True},
        service_tier="turbo", extra_body={"ignore_eos": True},
    ) as resp:
        assert resp.headers["x-turbogate-tier"] == "turbo"
        assert set(server_timing(resp.headers["server-timing"])) == {"l1", "l2", "ttft"}
        chunks = list(resp.parse())
    assert len(chunks) >= 3
    assert all(c.service_tier == "turbo" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    usage = [c.usage for c in chunks if c.usage is not None]
    assert usage and usage[-1].completion_tokens == 12


def test_bad_key_is_authentication_error(gw: Service) -> None:
    with pytest.raises(openai.AuthenticationError):
        client(gw, "sk-wrong").chat.completions.create(model=MODEL, messages=MSG)
    assert httpx.post(gw.url + "/v1/chat/completions", content=b"{}").status_code == 401


def test_models_is_the_union_of_pools(gw: Service) -> None:
    assert {m.id for m in client(gw).models.list()} == {MODEL, SLOW}


def _error(resp: httpx.Response) -> dict[str, Any]:
    err: dict[str, Any] = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def test_malformed_json_names_the_problem(gw: Service) -> None:
    resp = raw(gw, b'{"model": "llama-3.1-8b", "messages": [')
    assert resp.status_code == 400
    assert "not valid JSON" in _error(resp)["message"]


def test_missing_model(gw: Service) -> None:
    resp = raw(gw, json.dumps({"messages": MSG}))
    assert resp.status_code == 400 and _error(resp)["param"] == "model"
    with pytest.raises(openai.BadRequestError) as info:
        client(gw).chat.completions.create(model="", messages=MSG)  # type: ignore[arg-type]
    assert "model" in str(info.value)


def test_unknown_model(gw: Service) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client(gw).chat.completions.create(model="gpt-9", messages=MSG)
    assert "gpt-9" in info.value.message
    assert info.value.body["param"] == "model"  # type: ignore[index]


def test_oversized_body(gw: Service) -> None:
    resp = raw(gw, json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 10_000}]}))
    assert resp.status_code == 413 and "limit" in _error(resp)["message"]


def test_bad_fields_are_4xx_naming_them(gw: Service) -> None:
    resp = raw(gw, json.dumps({"model": MODEL}))
    assert resp.status_code == 400 and _error(resp)["param"] == "messages"
    resp = raw(gw, json.dumps({"model": MODEL, "messages": MSG, "service_tier": "ultra"}))
    assert resp.status_code == 400 and _error(resp)["param"] == "service_tier"
    resp = raw(gw, json.dumps({"model": MODEL, "messages": MSG, "stream": "yes"}))
    assert resp.status_code == 400 and _error(resp)["param"] == "stream"
    resp = raw(gw, json.dumps({"model": MODEL, "messages": MSG}), headers={"X-Turbogate-Tier": "gold"})
    assert resp.status_code == 400 and _error(resp)["param"] == "X-Turbogate-Tier"
    resp = raw(gw, json.dumps([1, 2]))
    assert resp.status_code == 400
    assert httpx.get(gw.url + "/v1/chat/completions").status_code == 405


def test_embeddings_validated_and_routed(gw: Service) -> None:
    resp = raw(gw, json.dumps({"model": MODEL}), path="/v1/embeddings")
    assert resp.status_code == 400 and _error(resp)["param"] == "input"
    # The emulator has no embeddings endpoint: its 404 comes back as is, tagged, never a 500.
    resp = raw(gw, json.dumps({"model": MODEL, "input": "hello"}), path="/v1/embeddings")
    assert resp.status_code == 404
    assert resp.headers["x-turbogate-tier"] == "standard"


def test_shed_request_is_rate_limit_error(gw: Service) -> None:
    held = client(gw, TINY_KEY).chat.completions.create(
        model=SLOW, messages=MSG, max_tokens=300, stream=True, extra_body={"ignore_eos": True})
    try:
        next(iter(held))  # the first request is now in flight
        with pytest.raises(openai.RateLimitError) as info:
            client(gw, TINY_KEY).chat.completions.create(model=MODEL, messages=MSG, max_tokens=4)
        assert info.value.response.headers["retry-after"].isdigit()
        assert info.value.body["code"] == "tenant_limit"  # type: ignore[index]
    finally:
        held.close()


def test_relax_deadline_ends_in_504(gw: Service) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client(gw).chat.completions.create(model=SLOW, messages=MSG, max_tokens=400, service_tier="flex",
                                           extra_body={"ignore_eos": True})
    assert info.value.status_code == 504
    assert "deadline" in info.value.message


def _running(emulator: Service) -> float:
    with urllib.request.urlopen(emulator.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "vllm:num_requests_running")


def test_client_disconnect_cancels_upstream_and_frees_the_slot(gw: Service, fleet: dict[str, Service]) -> None:
    body = json.dumps({"model": SLOW, "messages": MSG, "max_tokens": 2000, "ignore_eos": True, "stream": True})
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode()
    host, port = gw.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(request)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    wait_for(lambda: admin_state(gw.url)["pools"]["slow"]["in_flight"] == 1, what="stream in flight")
    assert _running(fleet["slow"]) >= 1
    sock.close()
    wait_for(lambda: admin_state(gw.url)["pools"]["slow"]["in_flight"] == 0, what="slot freed")
    wait_for(lambda: _running(fleet["slow"]) == 0, what="upstream request cancelled")


def _samples(gw: Service) -> list[Any]:
    text = httpx.get(gw.url + "/metrics").text
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def test_metrics_are_prometheus_text(gw: Service) -> None:
    client(gw).chat.completions.create(model=MODEL, messages=MSG, max_tokens=4, service_tier="priority")
    samples = _samples(gw)
    served = [s for s in samples if s.name == "turbogate_requests_total" and s.labels["tenant"] == "acme"
              and s.labels["tier_served"] == "turbo" and s.labels["status"] == "200"]
    assert served and served[0].value >= 1
    names = {s.name for s in samples}
    for name in ("turbogate_queue_time_seconds_bucket", "turbogate_upstream_latency_seconds_bucket",
                 "turbogate_ttft_seconds_bucket", "turbogate_queue_depth", "turbogate_replica_band",
                 "turbogate_replica_score", "turbogate_scale_out_desired", "turbogate_shed_total",
                 "turbogate_idle_poll_window_seconds", "turbogate_idle_poll_seconds_total"):
        assert name in names, name
    # The event loop's poller (on by default, gateway/busypoll.py) saw the request's events go by.
    polled = [s.value for s in samples if s.name == "turbogate_idle_poll_seconds_total"]
    assert polled[0] > 0
    assert KEY not in httpx.get(gw.url + "/metrics").text


def test_hot_switch_turbo_off_and_on(gw: Service) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    assert httpx.post(gw.url + "/admin/tiers/turbo", json={"enabled": False}).status_code == 401
    assert httpx.post(gw.url + "/admin/tiers/turbo", json={"enabled": "maybe"}, headers=admin).status_code == 400
    try:
        assert httpx.post(gw.url + "/admin/tiers/turbo", json={"enabled": False}, headers=admin).status_code == 200
        out = client(gw).chat.completions.create(model=MODEL, messages=MSG, max_tokens=4, service_tier="priority")
        assert out.service_tier == "standard"
        state = admin_state(gw.url)
        assert state["tiers"]["turbo"]["enabled"] is False
        assert state["replicas"][0]["band"] in {"light", "busy", "saturated"}
    finally:
        httpx.post(gw.url + "/admin/tiers/turbo", json={"enabled": True}, headers=admin)
    out = client(gw).chat.completions.create(model=MODEL, messages=MSG, max_tokens=4, service_tier="priority")
    assert out.service_tier == "turbo"
    # Per tenant as well.
    assert httpx.post(gw.url + "/admin/tenants/acme", json={"turbo_enabled": False}, headers=admin).status_code == 200
    try:
        out = client(gw).chat.completions.create(model=MODEL, messages=MSG, max_tokens=4, service_tier="priority")
        assert out.service_tier == "standard"
    finally:
        httpx.post(gw.url + "/admin/tenants/acme", json={"turbo_enabled": True}, headers=admin)


def test_health_and_ready(gw: Service) -> None:
    assert httpx.get(gw.url + "/health").status_code == 200
    assert httpx.get(gw.url + "/ready").json() == {"ready": True}


def test_secrets_never_logged(gw: Service) -> None:
    time.sleep(0.1)
    text = gw.log_text()
    for secret in (KEY, BASIC_KEY, TINY_KEY, ADMIN):
        assert secret not in text
