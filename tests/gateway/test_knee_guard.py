"""The knee guard in a real gateway: load past the pool's knee serves Turbo as Standard (and
says why), the guard reopens when the load stops, the admin can pin it, and it is observable
(issue 11)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

from tests.gateway.conftest import ADMIN, KEY, MODEL, admin_state, gateway_config, pool, wait_for
from turbogate.engine import EngineConfig
from turbogate.engine.capacity import saturated_rate
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.procs import Service, start_emulator, start_gateway

MSG = [{"role": "user", "content": "hi"}]


def ask_turbo(url: str, max_tokens: int = 2) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=60,
                      json={"model": MODEL, "messages": MSG, "max_tokens": max_tokens, "service_tier": "priority"})


def admin_events(url: str) -> list[dict[str, Any]]:
    req = urllib.request.Request(url + "/admin/events", headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        events: list[dict[str, Any]] = orjson.loads(resp.read())["events"]
    return events


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
    assert 'turbogate_knee_guard_knee_rps{pool="solo",source="config"} 3.0' in metrics
    wait_for(lambda: guard_state(gw.url) == "open", timeout=20, what="the guard to reopen")
    assert ask_turbo(gw.url).headers["x-turbogate-tier"] == "turbo"
    events = admin_events(gw.url)
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


def test_load_past_a_slow_emulators_knee_caps_turbo_by_the_online_estimate(tmp_path: Path) -> None:
    """No knee given (``serve --knee-from online``): the guard learns the emulator's knee from
    the live signals as an open-loop load passes it, caps Turbo, and reopens once the load stops."""
    # Two sequences at half an L4's speed: a knee of a few req/s of 8-token answers.
    emu = start_emulator("--gpu", "L4", "--model", MODEL, "--max-num-seqs", "2", "--time-scale", "2",
                         log_dir=tmp_path / "emu")
    capacity = saturated_rate(deployment(get_gpu("L4"), get_model(MODEL)), EngineConfig(max_num_seqs=2), 11, 8) / 2
    gw: Service | None = None
    try:
        cfg_path = tmp_path / "gateway.yaml"
        cfg_path.write_text(yaml.safe_dump(gateway_config(
            [pool("solo", [MODEL], [emu.url], max_concurrency=4)], knee_guard={"min_dwell_s": 1.0, "window_s": 3.0})))
        gw = start_gateway(cfg_path, "--knee-from", "online", log_dir=tmp_path / "gw")
        url = gw.url
        guard = admin_state(url)["pools"]["solo"]["knee_guard"]
        assert guard["knee_source"] == "online" and guard["knee_rps"] is None and guard["state"] == "open"
        stop = threading.Event()
        seen: set[str] = set()

        def offer(rate: float) -> None:  # open loop: arrivals do not wait for answers
            workers = ThreadPoolExecutor(32)
            while not stop.is_set():
                workers.submit(ask_turbo, url, 8)
                time.sleep(1.0 / rate)
            workers.shutdown(wait=False, cancel_futures=True)

        loader = threading.Thread(target=offer, args=(2 * capacity,), daemon=True)  # twice the knee
        loader.start()
        try:
            def past_the_knee() -> bool:
                seen.add(guard_state(url))
                return bool(seen & {"capped", "closed"})

            wait_for(past_the_knee, timeout=60, what="the guard to leave open under load")
        finally:
            stop.set()
            loader.join(timeout=60)
        assert "capped" in seen, (seen, admin_events(url), admin_state(url)["pools"]["solo"]["knee_guard"])
        learnt = admin_state(url)["pools"]["solo"]["knee_guard"]
        assert learnt["knee_rps"] is not None and learnt["knee_rps"] < 2 * capacity
        wait_for(lambda: guard_state(url) == "open", timeout=60, what="the guard to reopen after the load")
        events = admin_events(url)
        assert events[0]["from"] == "open" and events[0]["to"] in ("capped", "closed")
        assert "online:" in events[0]["why"] and events[-1]["to"] == "open"
    finally:
        if gw is not None:
            gw.stop()
        emu.stop()


def test_serve_refuses_a_knee_it_cannot_resolve(tmp_path: Path) -> None:
    """A bad ``--knee-from`` is one clear line and exit code 2 before anything listens."""
    from typer.testing import CliRunner

    from turbogate.cli import app

    cfg_path = tmp_path / "gateway.yaml"
    cfg_path.write_text(yaml.safe_dump(gateway_config([pool("solo", [MODEL], ["http://127.0.0.1:9"])])))
    runner = CliRunner()
    missing = runner.invoke(app, ["serve", "--config", str(cfg_path), "--knee-from", str(tmp_path / "no-run")])
    assert missing.exit_code == 2 and "pools.solo.knee_from: cannot read" in missing.output
    unknown = runner.invoke(app, ["serve", "--config", str(cfg_path), "--knee-from", "nope=online"])
    assert unknown.exit_code == 2 and "no pool 'nope'" in unknown.output
    no_plan = runner.invoke(app, ["serve", "--config", str(cfg_path), "--knee-from", "plan"])
    assert no_plan.exit_code == 2 and "needs a plan block" in no_plan.output
