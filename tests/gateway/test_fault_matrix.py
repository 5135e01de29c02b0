"""The fault matrix (issue 12): each sick-replica case through the emulator's fault flags, with
real processes.  Each test states what the client sees, whether the replica is ejected and taken
back, and that /ready tells the truth (a pool with no healthy replica is not ready)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, replica_state, wait_for
from turbogate.procs import Service, free_port, start_emulator

MSG = [{"role": "user", "content": "hi"}]
AUTH = {"Authorization": f"Bearer {KEY}"}


def _ready(gw: Service) -> bool:
    return httpx.get(gw.url + "/ready", timeout=5).status_code == 200


def _health(gw: Service, replica: str) -> str:
    return str(replica_state(gw.url, replica)["health"])


def _chat(gw: Service, tier: str = "standard", timeout: float = 30) -> httpx.Response:
    return httpx.post(gw.url + "/v1/chat/completions", headers=AUTH, timeout=timeout,
                      json={"model": MODEL, "messages": MSG, "max_tokens": 2, "service_tier": tier})


@pytest.fixture
def silent_replica() -> Iterator[str]:
    """A 'replica' that accepts connections and never reads or answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def test_crash_mid_stream(tmp_path: Path, gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    port = free_port()
    crashing = start_emulator("--time-scale", "0.05", "--model", MODEL, "--crash-mid-stream", port=port,
                              log_dir=tmp_path)
    url = f"http://127.0.0.1:{port}"
    gw = gateway_factory(gateway_config([pool("main", [MODEL], [url])]))
    # The client sees its stream begin, then end in an error event (no retry once bytes came).
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0) as client:
        got: list[str] = []
        with pytest.raises(openai.APIError):
            for chunk in client.chat.completions.create(model=MODEL, messages=MSG,  # type: ignore[arg-type]
                                                        max_tokens=200, stream=True):
                got.extend(c.delta.content or "" for c in chunk.choices)
    # The dead replica is ejected, the pool has none healthy: /ready says so, requests get 503.
    wait_for(lambda: _health(gw, url) == "ejected", what="the crashed replica ejected")
    assert not _ready(gw)
    down = _chat(gw)
    assert down.status_code == 503 and down.json()["error"]["code"] == "no_healthy_replica"
    assert int(down.headers["retry-after"]) >= 1
    # Restarted on its port, it is taken back and serves again.
    crashing.stop()
    with start_emulator("--time-scale", "0", "--model", MODEL, port=port, log_dir=tmp_path):
        wait_for(lambda: _health(gw, url) == "healthy", what="the restarted replica taken back")
        assert _ready(gw) and _chat(gw).status_code == 200


def test_hung_replica_is_avoided_for_turbo_and_ejected(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    hung = emulator_factory("--time-scale", "0", "--model", MODEL, "--hang-rate", "1")
    good = emulator_factory("--time-scale", "0", "--model", MODEL)
    gw = gateway_factory(gateway_config(
        [pool("main", [MODEL], [hung.url, good.url])],
        tiers={"turbo": {"deadline_s": 1.0}, "standard": {"deadline_s": 1.0}}))
    # Requests sent to the hung replica get 504 at the tier deadline; each hit is a strike,
    # and eject_after_failures strikes eject it.
    statuses = []
    for _ in range(12):
        statuses.append(_chat(gw).status_code)
        if replica_state(gw.url, hung.url)["ejections"]:
            break
    assert set(statuses) <= {200, 504} and 504 in statuses
    assert replica_state(gw.url, hung.url)["ejections"] == 1
    # Its /health still answers, so a probe takes it back, on probation (a strike kept) ...
    wait_for(lambda: _health(gw, hung.url) == "healthy", what="the hung replica probed back")
    assert replica_state(gw.url, hung.url)["failures"] > 0
    # ... where Turbo does not go while the good replica has room, and /ready stays true.
    assert all(_chat(gw, "turbo").status_code == 200 for _ in range(5))
    assert _ready(gw)


def test_5xx_storm_ejects_and_the_replica_is_taken_back(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    stormy = emulator_factory("--time-scale", "0", "--model", MODEL, "--error-rate", "1")
    good = emulator_factory("--time-scale", "0", "--model", MODEL)
    gw = gateway_factory(gateway_config([pool("main", [MODEL], [stormy.url, good.url])]))
    statuses = [_chat(gw).status_code for _ in range(10)]
    # The client sees the engine's 500 (an answer came, so no retry); eject_after_failures of them
    # eject the replica, and once probed back (on probation) a single 500 ejects it again.
    assert set(statuses) <= {200, 500} and 500 in statuses
    ejections = replica_state(gw.url, stormy.url)["ejections"]
    assert ejections >= 1 and statuses.count(500) <= ejections + 1
    assert all(_chat(gw, "turbo").status_code == 200 for _ in range(5))  # Turbo keeps off it
    assert _ready(gw)
    wait_for(lambda: _health(gw, stormy.url) == "healthy", what="the stormy replica probed back")


def test_slow_start(tmp_path: Path, gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    gw = gateway_factory(gateway_config([pool("main", [MODEL], [url])]))  # before its replica is up
    wait_for(lambda: not _ready(gw), what="/ready false with the replica down")
    with start_emulator("--time-scale", "0", "--model", MODEL, "--startup-delay", "3", port=port,
                        log_dir=tmp_path, wait=False):
        # While the engine loads (/health 503) it stays ejected: not ready, clients get 503 + Retry-After.
        wait_for(lambda: _answers_503(url), what="the engine listening, still loading")
        assert not _ready(gw)
        down = _chat(gw)
        assert down.status_code == 503 and "retry-after" in down.headers
        # Loaded, it is taken back.
        wait_for(lambda: _ready(gw), what="/ready once the engine has loaded")
        assert _chat(gw).status_code == 200


def _answers_503(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 503
    except httpx.HTTPError:
        return False


def test_slow_metrics(emulator_factory: Callable[..., Service],
                      gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    slow = emulator_factory("--time-scale", "0", "--model", MODEL, "--metrics-delay", "3")
    good = emulator_factory("--time-scale", "0", "--model", MODEL)
    gw = gateway_factory(gateway_config([pool("main", [MODEL], [slow.url, good.url])],
                                        scrape={"interval_s": 0.2, "stale_after_s": 1.0, "timeout_s": 0.5}))
    # Scrape timeouts only let its load go stale: it is not ejected (it still answers requests),
    # the client sees only 200s, and /ready stays true.
    wait_for(lambda: (replica_state(gw.url, slow.url)["metrics_age_s"] or 0) > 1.0 or
             replica_state(gw.url, slow.url)["metrics_age_s"] is None, what="the slow replica's load stale")
    assert all(_chat(gw).status_code == 200 for _ in range(6))
    state = replica_state(gw.url, slow.url)
    assert state["health"] == "healthy" and state["ejections"] == 0
    assert _ready(gw)


def test_replica_that_accepts_and_never_answers(
    silent_replica: str, gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    gw = gateway_factory(gateway_config([pool("main", [MODEL], [silent_replica])],
                                        tiers={"standard": {"deadline_s": 1.0}},
                                        scrape={"interval_s": 0.2, "stale_after_s": 3.0, "timeout_s": 0.5}))
    # Requests reach it and get 504 at the deadline; the strikes eject it.  Its /health probes
    # time out, so it is not taken back: /ready is false and clients get 503 at once.
    statuses = []
    for _ in range(4):
        statuses.append(_chat(gw, timeout=10).status_code)
        if _health(gw, silent_replica) == "ejected":
            break
    assert statuses[0] == 504 and _health(gw, silent_replica) == "ejected"
    assert not _ready(gw)
    down = _chat(gw, timeout=10)
    assert down.status_code == 503 and down.json()["error"]["code"] == "no_healthy_replica"
    assert int(down.headers["retry-after"]) >= 1
    assert _health(gw, silent_replica) == "ejected"
