"""Server-Timing carries L3 when the request met L3 (a model served by two pools), in the layers' order, and the
report's waterfall shows it as a segment (issue 42); a request that met no L3 carries none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, server_timing
from turbogate.procs import Service

MSG = [{"role": "user", "content": "Hi"}]


def _timing(gw: Service, stream: bool) -> tuple[list[str], dict[str, float]]:
    resp = httpx.post(gw.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                      json={"model": MODEL, "messages": MSG, "max_tokens": 2, "stream": stream})
    assert resp.status_code == 200, resp.text
    raw = resp.headers["server-timing"]
    return [part.split(";")[0].strip() for part in raw.split(",")], server_timing(raw)


def test_l3_time_in_server_timing_when_a_model_is_in_two_pools(
        emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    a, b = (emulator_factory("--time-scale", "0", "--model", MODEL, "--gpu", "L4") for _ in range(2))
    two = gateway_factory(gateway_config([pool("east", [MODEL], [a.url]), pool("west", [MODEL], [b.url])]))
    for stream, last in ((False, "upstream"), (True, "ttft")):
        names, timing = _timing(two, stream)
        assert names == ["l1", "l3", "l2", last], names
        assert timing["l3"] >= 0.0
    one = gateway_factory(gateway_config([pool("solo", [MODEL], [a.url])]))
    names, _ = _timing(one, False)
    assert names == ["l1", "l2", "upstream"], names
