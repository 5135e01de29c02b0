"""L3 region arbitration, Turbo's fallback and warm-ups through real processes on 127.0.0.1: two
gateway pools of emulators, each behind a delaying TCP relay (tests/gateway/netem.py) that
injects the latency of a far region."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.conftest import KEY, MODEL, admin_state, gateway_config, wait_for
from tests.gateway.netem import DelayRelay
from turbogate.procs import Service

MSG = [{"role": "user", "content": "Hi"}]
ALT_SVC_EU = 'h2="eu.api.example.com:443"; ma=60'


@pytest.fixture
def relays() -> Iterator[Callable[[Service], DelayRelay]]:
    made: list[DelayRelay] = []

    def make(emulator: Service) -> DelayRelay:
        relay = DelayRelay(int(emulator.url.rsplit(":", 1)[1]))
        relay.start()
        made.append(relay)
        return relay

    yield make
    for relay in made:
        relay.close()


def replica(url: str) -> dict[str, Any]:
    return {"url": url, "engine": "emulator", "max_concurrency": 16}


def ask(gw: Service, region: str | None = None, tier: str | None = None, session: str | None = None,
        stream: bool = False) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY}"}
    if region is not None:
        headers["X-Client-Region"] = region
    if tier is not None:
        headers["X-Turbogate-Tier"] = tier
    if session is not None:
        headers["X-Session-Id"] = session
    return httpx.post(gw.url + "/v1/chat/completions", headers=headers, timeout=30,
                      json={"model": MODEL, "messages": MSG, "max_tokens": 2, "stream": stream})


def served_region(gw: Service, region: str, **kw: Any) -> str | None:
    resp = ask(gw, region, **kw)
    return resp.headers.get("x-turbogate-region") if resp.status_code == 200 else None


def test_region_choice_follows_injected_latency_and_fails_over(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service],
    relays: Callable[[Service], DelayRelay],
) -> None:
    eu = relays(emulator_factory("--time-scale", "0", "--model", MODEL, "--seed", "1"))
    us = relays(emulator_factory("--time-scale", "0", "--model", MODEL, "--seed", "2"))
    gw = gateway_factory(gateway_config(
        [{"name": "eu-pool", "models": [MODEL], "region": "eu", "alt_svc": ALT_SVC_EU, "replicas": [replica(eu.url)]},
         {"name": "us-pool", "models": [MODEL], "region": "us", "replicas": [replica(us.url)]}],
        regions={"rtt_ms": {"eu": {"eu": 5, "us": 60}, "us": {"eu": 60, "us": 5}}, "probe_interval_s": 0.1,
                 "ewma_alpha": 0.5, "aliases": {"DE": "eu", "US": "us"}}))
    # Nothing injected: each client region is served by its own (the configured legs decide).
    resp = ask(gw, "eu")
    assert resp.status_code == 200
    assert resp.headers["x-turbogate-region"] == "eu" and resp.headers["alt-svc"] == ALT_SVC_EU
    assert served_region(gw, "us") == "us" and "alt-svc" not in ask(gw, "us").headers
    assert served_region(gw, "DE") == "eu"  # a CDN country code, mapped by aliases
    # 150 ms each way in front of the eu pool: probes and streamed calls see it; eu clients move.
    eu.delay_s = 0.15
    wait_for(lambda: served_region(gw, "eu", stream=True) == "us", what="eu clients served by us once eu is slow")
    assert admin_state(gw.url)["regions"]["pool_ms"]["eu-pool"] > 100
    eu.delay_s = 0.0
    us.delay_s = 0.15  # and the other way round: now even us clients cross the ocean
    wait_for(lambda: served_region(gw, "us") == "eu", what="us clients served by eu once us is slow")
    us.delay_s = 0.0
    wait_for(lambda: served_region(gw, "eu") == "eu" and served_region(gw, "us") == "us", what="back home")
    # The eu pool goes away (connection refused): eu clients fail over to us.
    eu.stop()
    wait_for(lambda: served_region(gw, "eu") == "us", what="failover of eu clients to us")
    assert admin_state(gw.url)["regions"]["failovers"] >= 1
    assert httpx.get(gw.url + "/ready").status_code == 200  # every model still has a healthy pool
    eu.start()
    wait_for(lambda: served_region(gw, "eu") == "eu", what="eu clients back on eu")
    # Bad region or session headers are a 400 naming the header.
    bad = ask(gw, "eu west")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Client-Region"
    bad = ask(gw, "eu", session="x" * 300)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Session-Id"


def test_a_session_sticks_to_its_pool_and_the_openai_client_works_unchanged(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service],
    relays: Callable[[Service], DelayRelay],
) -> None:
    eu = relays(emulator_factory("--time-scale", "0", "--model", MODEL, "--seed", "1"))
    us = relays(emulator_factory("--time-scale", "0", "--model", MODEL, "--seed", "2"))
    gw = gateway_factory(gateway_config(
        [{"name": "eu-pool", "models": [MODEL], "region": "eu", "replicas": [replica(eu.url)]},
         {"name": "us-pool", "models": [MODEL], "region": "us", "replicas": [replica(us.url)]}],
        regions={"rtt_ms": {"eu": {"eu": 5, "us": 60}}, "probe_interval_s": 0.1, "ewma_alpha": 1.0,
                 "sticky_s": 600}))
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MSG, max_tokens=2, extra_headers={"X-Client-Region": "eu", "X-Session-Id": "chat-1"})
    assert raw.headers["x-turbogate-region"] == "eu"
    assert raw.parse().choices[0].message.content
    eu.delay_s = 0.2
    wait_for(lambda: served_region(gw, "eu") == "us", what="new eu clients moved to us")
    assert served_region(gw, "eu", session="chat-1") == "eu"  # the session stays where it began
    assert served_region(gw, "eu", session="chat-2") == "us"  # a new one starts on the best pool


def test_turbo_falls_back_to_the_standard_pool_and_warm_ups_on_join_and_comeback(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service],
    relays: Callable[[Service], DelayRelay],
) -> None:
    fast = relays(emulator_factory("--time-scale", "0", "--model", MODEL, "--seed", "1"))
    std = relays(emulator_factory("--time-scale", "0", "--model", MODEL, "--seed", "2"))
    gw = gateway_factory(gateway_config(
        [{"name": "turbo-pool", "models": [MODEL], "region": "eu", "replicas": [replica(fast.url)]},
         {"name": "std-pool", "models": [MODEL], "region": "eu", "turbo": False, "replicas": [replica(std.url)]}],
        warmup={"enabled": True}))
    wait_for(lambda: fast.posts == 1 and std.posts == 1, what="one warm-up per replica at start")
    turbo = ask(gw, tier="turbo")
    assert turbo.status_code == 200
    assert turbo.headers["x-turbogate-tier"] == "turbo" and "x-turbogate-downgrade" not in turbo.headers
    assert fast.posts == 2  # Turbo went to the Turbo pool
    fast.stop()  # every Turbo-capable pool down: Turbo is served Standard by the Standard pool, and says so

    def fell_back() -> bool:
        r = ask(gw, tier="turbo")
        return r.status_code == 200 and r.headers.get("x-turbogate-downgrade") == "turbo_pools_unhealthy"

    wait_for(fell_back, what="Turbo falls back to the Standard pool")
    r = ask(gw, tier="turbo")
    assert r.headers["x-turbogate-tier"] == "standard" and r.json()["service_tier"] == "standard"
    before = fast.posts
    fast.start()  # back: one warm-up, then Turbo is Turbo again
    wait_for(lambda: fast.posts == before + 1, what="a warm-up when the replica comes back")

    def turbo_again() -> bool:
        r = ask(gw, tier="turbo")
        return r.status_code == 200 and r.headers["x-turbogate-tier"] == "turbo"

    wait_for(turbo_again, what="Turbo back on the Turbo pool")
    assert admin_state(gw.url)["regions"] is not None
