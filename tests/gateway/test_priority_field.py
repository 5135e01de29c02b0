"""``scheduling_policy: priority`` pools get the tier as vLLM's ``priority`` field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.gateway.conftest import KEY, gateway_config, pool
from turbogate.procs import Service

MSG = [{"role": "user", "content": "hi"}]


def test_priority_field_reaches_the_engine(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    prio = emulator_factory("--time-scale", "0", "--scheduling-policy", "priority", "--served-model-name", "prio")
    fcfs = emulator_factory("--time-scale", "0", "--served-model-name", "fcfs")
    gw = gateway_factory(gateway_config([
        pool("prio", ["prio"], [prio.url], scheduling_policy="priority"),
        # Misconfigured on purpose: the engine runs fcfs, so a non-zero priority is refused by it,
        # which shows the field was sent.
        pool("fcfs", ["fcfs"], [fcfs.url], scheduling_policy="priority"),
    ]))
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
    for tier in ("priority", "default", "flex"):
        assert client.chat.completions.create(model="prio", messages=MSG, max_tokens=2, service_tier=tier).choices
    # Turbo maps to priority 0 (vLLM's default), which even an fcfs engine accepts…
    assert client.chat.completions.create(model="fcfs", messages=MSG, max_tokens=2, service_tier="priority").choices
    # …Standard maps to 1, which it refuses: its 400 is passed through, naming the field.
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="fcfs", messages=MSG, max_tokens=2, service_tier="default")
    assert "priority" in str(info.value)
