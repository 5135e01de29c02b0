"""Server-Timing carries L3 when the request met L3 (a model served by two pools), in the layers' order; a job
step's Server-Timing (in the job's view) leads with L4, its wait for the steps it depends on (issue 42)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, server_timing
from tests.gateway.test_jobs import DIAMOND, gw, post_job, wait_done  # noqa: F401 (gw: a fixture)
from turbogate.procs import Service

MSG = [{"role": "user", "content": "Hi"}]


def _timing(gateway: Service, stream: bool) -> tuple[list[str], dict[str, float]]:
    resp = httpx.post(gateway.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
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


def test_a_job_step_carries_l4_its_wait_for_the_steps_it_depends_on(gw: Service) -> None:  # noqa: F811
    resp = post_job(gw, DIAMOND)
    assert resp.status_code == 202, resp.text
    view = wait_done(gw, resp.json()["id"])
    steps = {s["id"]: s for s in view["steps"]}
    for sid, s in steps.items():
        names = [part.split(";")[0].strip() for part in s["server_timing"].split(",")]
        assert names[:2] == ["l4", "l1"] and names[-1] in ("upstream", "ttft"), (sid, names)
        l4_ms = server_timing(s["server_timing"])["l4"]
        assert l4_ms == pytest.approx(s["started_s"] * 1000, abs=0.01)  # from the job's creation to its start
    assert server_timing(steps["d"]["server_timing"])["l4"] >= server_timing(steps["b"]["server_timing"])["l4"]
