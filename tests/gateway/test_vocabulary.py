"""OpenAI's tier words on request (service_tier_names: openai), the downgrade reason, and the
admin state telling the truth about a tenant's Turbo (issue 18)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from tests.gateway.conftest import BASIC_KEY, KEY, MODEL, admin_state, gateway_config, pool
from turbogate.procs import Service

MSG = [{"role": "user", "content": "hi"}]


def client(gw: Service, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=30)


def test_openai_words_in_answers_when_configured(emu: Service,
                                                 gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    gw = gateway_factory(gateway_config([pool("p", [MODEL], [emu.url])], service_tier_names="openai"))
    answers = {}
    for asked in ("priority", "default", "flex"):
        resp = client(gw).chat.completions.with_raw_response.create(model=MODEL, messages=MSG, max_tokens=2,
                                                                    service_tier=asked)  # type: ignore[arg-type]
        answers[asked] = (resp.parse().service_tier, resp.headers["x-turbogate-tier"])
    assert answers == {"priority": ("priority", "turbo"), "default": ("default", "standard"),
                       "flex": ("flex", "relax")}
    stream = client(gw).chat.completions.create(model=MODEL, messages=MSG, max_tokens=3, stream=True,
                                                service_tier="priority")
    assert {chunk.service_tier for chunk in stream} == {"priority"}


def test_turbogate_words_by_default_and_the_downgrade_says_why(
        emu: Service, gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    gw = gateway_factory(gateway_config([pool("p", [MODEL], [emu.url])]))
    resp = client(gw, BASIC_KEY).chat.completions.with_raw_response.create(
        model=MODEL, messages=MSG, max_tokens=2, service_tier="priority")
    assert resp.parse().service_tier == "standard"
    assert resp.headers["x-turbogate-downgrade"] == "not_entitled"
    state = admin_state(gw.url)["tenants"]
    assert state["basic"]["turbo_enabled"] is False  # not entitled: no Turbo, whatever the switches say
    assert state["acme"]["turbo_enabled"] is True
