"""L2 through real emulators: steer away from a saturated replica, eject a dead one, take it back."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.conftest import KEY, MODEL, admin_state, gateway_config, held_stream, pool, replica_state, wait_for
from turbogate.procs import Service, start_emulator

MSG = [{"role": "user", "content": "Hi"}]


def _served(gw: Service) -> dict[str, int]:
    return {r["id"]: r["served"] for r in admin_state(gw.url)["replicas"]}


@contextmanager
def _hogged(engine_url: str, streams: int) -> Iterator[None]:
    """``streams`` long streams straight to the engine, behind the gateway's back, read until the block ends."""
    stop = threading.Event()

    def hog() -> None:
        with held_stream(engine_url, max_tokens=5000) as stream:
            for _ in stream.iter_bytes():
                if stop.is_set():
                    return

    hogs = [threading.Thread(target=hog) for _ in range(streams)]
    for t in hogs:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in hogs:
            t.join(timeout=30)


def test_steers_away_from_a_replica_whose_metrics_say_saturated(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    light = emulator_factory("--time-scale", "0", "--model", MODEL)
    hot = emulator_factory("--time-scale", "1", "--max-num-seqs", "2", "--model", MODEL)
    gw = gateway_factory(gateway_config([pool("main", [MODEL], [light.url, hot.url], max_concurrency=16)],
                                        bands={"scale_out_after_s": 0.5}))
    # Load `hot` directly, behind the gateway's back: 2 running and a queue waiting.
    with _hogged(hot.url, 8):
        wait_for(lambda: replica_state(gw.url, hot.url)["band"] == "saturated"
                 and (replica_state(gw.url, hot.url)["waiting"] or 0) > 0, what="hot replica saturated by metrics")
        assert replica_state(gw.url, light.url)["band"] == "light"
        before = _served(gw)
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
        for _ in range(20):
            client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4)
        after = _served(gw)
        assert after[light.url] - before[light.url] == 20
        assert after[hot.url] == before[hot.url]


def test_scale_out_signal_when_a_pool_stays_saturated(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    hot = emulator_factory("--time-scale", "1", "--max-num-seqs", "1", "--model", MODEL)
    gw = gateway_factory(gateway_config([pool("solo", [MODEL], [hot.url])], bands={"scale_out_after_s": 0.5}))

    def gauge() -> float:
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(gw.url + "/metrics").text
        return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                    if s.name == "turbogate_scale_out_desired" and s.labels["pool"] == "solo")

    assert gauge() == 0.0
    with _hogged(hot.url, 4):
        wait_for(lambda: gauge() == 1.0, what="turbogate_scale_out_desired{pool=solo} == 1")


def test_ejects_a_killed_replica_and_takes_it_back(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service], tmp_path: Any
) -> None:
    a = emulator_factory("--time-scale", "0", "--model", MODEL)
    b = emulator_factory("--time-scale", "0", "--model", MODEL)
    gw = gateway_factory(gateway_config([pool("main", [MODEL], [a.url, b.url])]))
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
    wait_for(lambda: replica_state(gw.url, a.url)["band"] == "light", what="first scrape")
    for _ in range(6):
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4)
    assert all(n > 0 for n in _served(gw).values())
    port = a.port
    a.kill()
    # Every request still succeeds: one that hits the dead replica is retried on the other.
    for _ in range(10):
        assert client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4).choices
    wait_for(lambda: replica_state(gw.url, a.url)["health"] == "ejected", what="ejection")
    assert httpx.get(gw.url + "/ready").status_code == 200  # b still serves
    served_a = _served(gw)[a.url]
    for _ in range(5):
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4)
    assert _served(gw)[a.url] == served_a
    back = start_emulator("--time-scale", "0", "--model", MODEL, port=port, log_dir=tmp_path / "logs")
    try:
        wait_for(lambda: replica_state(gw.url, a.url)["health"] == "healthy"
                 and replica_state(gw.url, a.url)["band"] == "light", what="re-probe and take back")
        for _ in range(10):
            client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4)
        assert _served(gw)[a.url] > served_a
    finally:
        back.stop()


def test_lone_dead_replica_gives_502_then_503_with_retry_after(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    gw = gateway_factory(gateway_config([pool("solo", [MODEL], [emu.url])]))
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
    assert client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2).choices
    emu.kill()
    first = httpx.post(gw.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                       json={"model": MODEL, "messages": MSG, "max_tokens": 2}, timeout=30)
    # Either the request found it dead (502) or the scraper had ejected it already (503).
    assert first.status_code in (502, 503), first.text
    wait_for(lambda: replica_state(gw.url, emu.url)["health"] == "ejected", what="ejection")
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2)
    assert info.value.status_code == 503
    assert info.value.body["code"] == "no_healthy_replica"  # type: ignore[index]
    assert int(info.value.response.headers["retry-after"]) >= 1
    assert httpx.get(gw.url + "/ready").status_code == 503
