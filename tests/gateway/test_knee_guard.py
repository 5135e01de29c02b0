"""The knee guard in a real gateway: load past the pool's knee serves Turbo as Standard (and
says why), the guard reopens when the load stops, the admin can pin it, and it is observable
(issue 11)."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.conftest import ADMIN, KEY, MODEL, admin_state, gateway_config, pool, wait_for
from turbogate.procs import Service, start_emulator

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = start_emulator("--time-scale", "0", "--model", MODEL, log_dir=tmp_path_factory.mktemp("emu"))
    yield svc
    svc.stop()


def ask_turbo(url: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                      json={"model": MODEL, "messages": MSG, "max_tokens": 2, "service_tier": "priority"})


def guard_state(url: str) -> str:
    state: str = admin_state(url)["pools"]["solo"]["knee_guard"]["state"]
    return state


def test_load_past_the_knee_caps_turbo_and_the_guard_reopens(
        emu: Service, gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    cfg = gateway_config([pool("solo", [MODEL], [emu.url], knee_rps=3.0)],
                         knee_guard={"min_dwell_s": 0.5, "window_s": 1.0})
    gw = gateway_factory(cfg)
    assert guard_state(gw.url) == "open"
    assert ask_turbo(gw.url).headers["x-turbogate-tier"] == "turbo"
    downgraded: list[str] = []
    with ThreadPoolExecutor(8) as pool_:
        for _ in range(6):  # well past 3 req/s
            for r in pool_.map(lambda _i: ask_turbo(gw.url), range(16)):
                assert r.status_code == 200
                if r.headers["x-turbogate-tier"] == "standard":
                    downgraded.append(r.headers["x-turbogate-downgrade"])
                    assert r.json()["service_tier"] == "standard"
    assert downgraded and set(downgraded) <= {"knee_guard_capped", "knee_guard_closed"}
    assert guard_state(gw.url) in ("capped", "closed")
    metrics = httpx.get(gw.url + "/metrics", timeout=10).text
    assert 'turbogate_knee_guard_state{pool="solo"}' in metrics
    wait_for(lambda: guard_state(gw.url) == "open", timeout=20, what="the guard to reopen")
    assert ask_turbo(gw.url).headers["x-turbogate-tier"] == "turbo"
    req = urllib.request.Request(gw.url + "/admin/events", headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        events = orjson.loads(resp.read())["events"]
    assert events[0]["from"] == "open" and events[-1]["to"] == "open"
    assert all("knee" in e["why"] for e in events)


def test_the_admin_pins_the_guard(emu: Service, gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    gw = gateway_factory(gateway_config([pool("solo", [MODEL], [emu.url], knee_rps=100.0)]))
    headers = {"Authorization": f"Bearer {ADMIN}"}
    r = httpx.post(gw.url + "/admin/pools/solo/guard", json={"state": "closed"}, headers=headers, timeout=10)
    assert r.status_code == 200
    answer = ask_turbo(gw.url)
    assert answer.headers["x-turbogate-tier"] == "standard"
    assert answer.headers["x-turbogate-downgrade"] == "knee_guard_closed"
    httpx.post(gw.url + "/admin/pools/solo/guard", json={"state": None}, headers=headers, timeout=10)
    assert ask_turbo(gw.url).headers["x-turbogate-tier"] == "turbo"
    missing = httpx.post(gw.url + "/admin/pools/nope/guard", json={"state": None}, headers=headers, timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "pool"
