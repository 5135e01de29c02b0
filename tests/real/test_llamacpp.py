"""The gateway against real llama.cpp (``llama-cpp-python[server]``, a tiny random GGUF).

That server has no ``/metrics`` and no ``/health``: engine kind ``llamacpp`` is not scraped, so L2 works
from the gateway's own in-flight counts, and health is probed on ``/v1/models``.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import openai

from tests.gateway.conftest import admin_state, wait_for
from tests.real.conftest import KEY, gateway_yaml, only_replica
from turbogate.procs import Service
from turbogate.realengines import LLAMACPP_MODEL_NAME

MODEL = LLAMACPP_MODEL_NAME
MSG = [{"role": "user", "content": "hello there"}]


def test_the_server_has_no_metrics_endpoint(llamacpp_engine: Service) -> None:
    try:
        urllib.request.urlopen(llamacpp_engine.url + "/metrics", timeout=5)
        raise AssertionError("llama_cpp.server grew a /metrics endpoint: docs/engines.md should say so")
    except urllib.error.HTTPError as exc:
        assert exc.code == 404


def test_chat_and_streaming_through_the_gateway_with_own_in_flight_counts(
    llamacpp_engine: Service, gateway: Callable[[dict[str, Any]], Service]
) -> None:
    gw = gateway(gateway_yaml([{"url": llamacpp_engine.url, "engine": "llamacpp", "max_concurrency": 2}], MODEL))
    replica = only_replica(gw.url)
    assert replica["health"] == "healthy" and replica["running"] is None  # nothing scraped, nothing guessed
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    plain = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=6, service_tier="priority")
    assert plain.service_tier == "priority" and plain.choices[0].message.content is not None
    assert plain.usage is not None and plain.usage.completion_tokens >= 1
    chunks = list(client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=6, stream=True,
                                                 service_tier="default"))
    assert chunks and all(c.service_tier == "default" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    # Load: the gateway's own in-flight count against the replica's limit (no queue depth to read).  Five at
    # once: the gateway holds no more than max_concurrency (less a Turbo holdback) in flight, and queues the rest
    # itself; the server (one request at a time) never sees the pile.
    peak: list[int] = []
    queued: list[int] = []
    threads = [threading.Thread(target=lambda: client.chat.completions.create(
        model=MODEL, messages=MSG, max_tokens=100)) for _ in range(5)]
    for t in threads:
        t.start()

    def gateway_queues() -> bool:
        state = admin_state(gw.url)
        peak.append(int(state["replicas"][0]["in_flight"]))
        queued.append(int(state["pools"]["real"]["queues"]["standard"]["queued"]))
        return peak[-1] >= 1 and queued[-1] >= 1

    wait_for(gateway_queues, 60, "requests in flight to the replica and more queued in the gateway")
    for t in threads:
        t.join(timeout=300)
    assert 1 <= max(peak) <= 2, peak
    wait_for(lambda: only_replica(gw.url)["in_flight"] == 0, 30, "the in-flight count back to zero")
    assert only_replica(gw.url)["metrics_age_s"] is None  # never scraped
