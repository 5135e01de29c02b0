"""Bounded queues and queue-time budgets through the gateway: 503/429 with Retry-After."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import BASIC_KEY, KEY, MODEL, admin_state, gateway_config, held_stream, pool, wait_for
from turbogate.procs import Service

MSG = [{"role": "user", "content": "hi"}]


def test_full_queue_and_queue_timeout_are_503_with_retry_after(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    emu = emulator_factory("--time-scale", "1", "--model", MODEL)
    gw = gateway_factory(gateway_config(
        [pool("main", [MODEL], [emu.url], max_concurrency=1)],
        tiers={"standard": {"max_utilization": 1.0, "queue_bound": 2, "queue_budget_s": 1.5}},
    ))
    # One long stream holds the only slot.
    with held_stream(gw.url, BASIC_KEY) as resp:
        assert resp.status_code == 200
        queued: list[httpx.Response] = []

        def wait_in_queue() -> None:
            queued.append(httpx.post(gw.url + "/v1/chat/completions", timeout=60,
                                     headers={"Authorization": f"Bearer {BASIC_KEY}"},
                                     json={"model": MODEL, "messages": MSG, "max_tokens": 2}))

        waiters = [threading.Thread(target=wait_in_queue) for _ in range(2)]
        for t in waiters:
            t.start()
        wait_for(lambda: admin_state(gw.url)["pools"]["main"]["queues"]["standard"]["queued"] == 2,
                 what="two requests queued")
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
        # Another tenant finds the queue full: the fleet cannot take it → 503.
        try:
            client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2)
            raise AssertionError("expected a 503")
        except openai.InternalServerError as exc:
            assert exc.status_code == 503
            assert exc.body["code"] == "queue_full"  # type: ignore[index]
            assert int(exc.response.headers["retry-after"]) >= 1
        # The tenant that fills the queue is over its share → 429.
        with openai.OpenAI(base_url=gw.url + "/v1", api_key=BASIC_KEY, max_retries=0) as basic:
            try:
                basic.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2)
                raise AssertionError("expected a 429")
            except openai.RateLimitError as exc:
                assert exc.body["code"] == "tenant_share"  # type: ignore[index]
        for t in waiters:
            t.join(timeout=30)
        # The queued ones waited past the 1.5 s budget while the stream held the slot.
        assert [r.status_code for r in queued] == [503, 503]
        assert all(r.json()["error"]["code"] == "queue_timeout" and "retry-after" in r.headers for r in queued)
    shed = {s.labels["reason"]: s.value for f in text_string_to_metric_families(httpx.get(gw.url + "/metrics").text)
            for s in f.samples if s.name == "turbogate_shed_total" and s.labels["tier"] == "standard"}
    assert shed == {"queue_timeout": 2.0, "queue_full": 1.0, "tenant_share": 1.0}
