"""Who may read /metrics (a token, or a port of its own), TLS on the listener, and each request
counted once in turbogate_requests_total (issue 12, items 6 and 7)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import BASIC_KEY, KEY, MODEL, admin_state, gateway_config, held_stream, pool, wait_for
from turbogate.config import hash_key
from turbogate.procs import Service, free_port, start_service

MSG = [{"role": "user", "content": "hi"}]
METRICS_TOKEN = "metrics-reader-token"


def _requests_total(text: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "turbogate_requests":
            for s in family.samples:
                if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
    return total


def test_metrics_token_and_separate_port(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    gw = gateway_factory(gateway_config([pool("main", [MODEL], [emu.url])],
                                        metrics={"token_sha256": hash_key(METRICS_TOKEN)}))
    assert httpx.get(gw.url + "/metrics", timeout=10).status_code == 401
    wrong = httpx.get(gw.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_metrics_token"
    ok = httpx.get(gw.url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10)
    assert ok.status_code == 200 and "turbogate_requests" in ok.text

    port = free_port()
    apart = gateway_factory(gateway_config([pool("main", [MODEL], [emu.url])], metrics={"port": port}))
    assert httpx.get(apart.url + "/metrics", timeout=10).status_code == 404  # not on the public listener
    own = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert own.status_code == 200 and "turbogate_queue_depth" in own.text
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).status_code == 404
    assert httpx.post(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 405
    paths = httpx.get(apart.url + "/openapi.json", timeout=10).json()["paths"]
    assert "/metrics" not in paths and "/v1/chat/completions" in paths


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls_listener(tmp_path: Path, emulator_factory: Callable[..., Service],
                      gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    path = tmp_path / "tls.yaml"
    path.write_text(yaml.safe_dump(gateway_config([pool("main", [MODEL], [emu.url])],
                                                  tls={"certfile": str(cert), "keyfile": str(key)})))
    gw = start_service("gateway", ["serve", "--config", str(path)], log_dir=tmp_path, wait=False)
    base = gw.url.replace("http://", "https://")
    trust = ssl.create_default_context(cafile=str(cert))
    try:
        def up() -> bool:
            try:
                return httpx.get(base + "/health", verify=trust, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, what="the TLS listener")
        with pytest.raises(httpx.HTTPError):  # plain HTTP gets no answer
            httpx.get(gw.url + "/health", timeout=5)
        with openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0,
                           http_client=httpx.Client(verify=trust)) as client:
            out = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2)  # type: ignore[arg-type]
        assert out.choices[0].message.content
    finally:
        gw.stop()


def test_a_queue_timeout_is_counted_once(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    emu = emulator_factory("--time-scale", "1", "--model", MODEL)
    gw = gateway_factory(gateway_config(
        [pool("main", [MODEL], [emu.url], max_concurrency=1)],
        tiers={"standard": {"max_utilization": 1.0, "queue_budget_s": 0.5}},
    ))
    with held_stream(gw.url, KEY) as resp:
        assert resp.status_code == 200
        wait_for(lambda: admin_state(gw.url)["pools"]["main"]["in_flight"] >= 1, what="the slot held")
        shed: list[httpx.Response] = []
        waiter = threading.Thread(target=lambda: shed.append(httpx.post(
            gw.url + "/v1/chat/completions", timeout=30, headers={"Authorization": f"Bearer {BASIC_KEY}"},
            json={"model": MODEL, "messages": MSG, "max_tokens": 2})))
        waiter.start()
        waiter.join(30)
        assert shed and shed[0].status_code == 503 and shed[0].json()["error"]["code"] == "queue_timeout"
    text = httpx.get(gw.url + "/metrics", timeout=10).text
    assert _requests_total(text, tenant="basic", status="503") == 1
