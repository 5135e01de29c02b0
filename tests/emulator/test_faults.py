"""Fault injection and lifecycle: errors, hangs, crashes, slow start-up, client disconnects."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import httpx
import openai
import pytest

from tests.emulator.conftest import MODEL, scrape
from turbogate.procs import free_port, start_emulator

MESSAGES = [{"role": "user", "content": "hello"}]


def _client(url: str, timeout: float = 30) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=timeout)


def test_error_rate_one_answers_500_with_an_error_body(emulator_factory) -> None:  # type: ignore[no-untyped-def]
    svc = emulator_factory("--time-scale", "0", "--error-rate", "1.0")
    with pytest.raises(openai.InternalServerError) as info:
        _client(svc.url).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    assert info.value.status_code == 500
    assert "injected" in info.value.message
    assert urllib.request.urlopen(svc.url + "/health", timeout=5).status == 200  # still alive


def test_hang_rate_one_never_answers(emulator_factory) -> None:  # type: ignore[no-untyped-def]
    svc = emulator_factory("--time-scale", "0", "--hang-rate", "1.0")
    with pytest.raises(openai.APITimeoutError):
        _client(svc.url, timeout=1.0).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    assert svc.alive()


def test_crash_after_n_requests_exits(emulator_factory) -> None:  # type: ignore[no-untyped-def]
    svc = emulator_factory("--time-scale", "0", "--crash-after", "2")
    client = _client(svc.url)
    for _ in range(2):
        resp = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
        assert resp.choices[0].message.content
    assert svc.process.wait(timeout=15) == 3
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)


def test_startup_delay_health_503_then_200(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    svc = start_emulator("--time-scale", "0", "--startup-delay", "4", port=port, wait=False, log_dir=tmp_path)
    try:
        statuses = []
        while True:
            assert svc.alive(), svc.log_text()
            try:
                with urllib.request.urlopen(svc.url + "/health", timeout=2) as resp:
                    statuses.append(resp.status)
                    break
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)
            except urllib.error.URLError:
                pass  # not listening yet
            time.sleep(0.05)
        assert statuses[0] == 503 and statuses[-1] == 200
    finally:
        svc.stop()


def test_client_disconnect_aborts_the_engine_request(emulator_factory) -> None:  # type: ignore[no-untyped-def]
    # Real-time engine: a 5,000-token answer takes tens of seconds, so it is surely in flight.
    svc = emulator_factory("--time-scale", "1")
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 5000, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=30) as http, http.stream("POST", svc.url + "/v1/chat/completions", json=body) as resp:
        lines = resp.iter_lines()
        assert next(lines).startswith("data: ")
        assert scrape(svc.url)["vllm:num_requests_running"] == 1
    # The connection is closed: the engine must drop the request.
    for _ in range(200):
        if scrape(svc.url)["vllm:num_requests_running"] == 0:
            break
        time.sleep(0.05)
    values = scrape(svc.url)
    assert values["vllm:num_requests_running"] == 0 and values["vllm:kv_cache_usage_perc"] == 0
    assert values["vllm:generation_tokens_total"] < 5000
