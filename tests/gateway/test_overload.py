"""Under overload by Standard traffic, Turbo's queue time stays small and Relax is still served."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from typing import Any

import httpx

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, server_timing
from turbogate.procs import Service

BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 24,
        "ignore_eos": True}


def _call(client: httpx.Client, url: str, tier: str) -> tuple[int, dict[str, float], dict[str, Any]]:
    resp = client.post(url + "/v1/chat/completions", json={**BODY, "service_tier": tier},
                       headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    timing = server_timing(resp.headers["server-timing"]) if "server-timing" in resp.headers else {}
    return resp.status_code, timing, resp.json()


def test_turbo_queue_time_under_standard_overload(
    emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]
) -> None:
    emulators = [emulator_factory("--time-scale", "1", "--max-num-seqs", "4", "--model", MODEL, "--seed", str(i))
                 for i in range(2)]
    cfg = gateway_config(
        [pool("main", [MODEL], [e.url for e in emulators], max_concurrency=4)],
        tiers={
            "turbo": {"queue_budget_s": 30},
            "standard": {"max_utilization": 0.75, "queue_bound": 1000, "queue_budget_s": 60},
            "relax": {"min_share": 0.05, "capacity_share": 0.25, "max_utilization": 0.5, "queue_budget_s": 60},
        },
    )
    gw = gateway_factory(cfg)
    stop = threading.Event()
    standard_l1: list[float] = []
    errors: list[int] = []

    def flood() -> None:
        with httpx.Client() as client:
            while not stop.is_set():
                status, timing, _ = _call(client, gw.url, "default")
                if status == 200:
                    standard_l1.append(timing["l1"])
                else:
                    errors.append(status)

    threads = [threading.Thread(target=flood) for _ in range(24)]
    for t in threads:
        t.start()
    relax_result: list[tuple[int, str]] = []
    try:
        with httpx.Client() as client:
            # Let the standard queue build up first.
            while len(standard_l1) < 30:
                stop.wait(0.1)
            def one_relax() -> None:
                with httpx.Client() as relax_client:
                    status, _, body = _call(relax_client, gw.url, "flex")
                relax_result.append((status, body.get("service_tier", "")))

            relax = threading.Thread(target=one_relax)
            relax.start()
            turbo_l1 = []
            for _ in range(12):
                status, timing, body = _call(client, gw.url, "priority")
                assert status == 200 and body["service_tier"] == "turbo"
                turbo_l1.append(timing["l1"])
            relax.join(timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors
    assert relax_result == [(200, "relax")]
    contended = standard_l1[30:]  # once the queue has formed
    assert statistics.median(contended) > 0
    assert statistics.median(turbo_l1) < statistics.median(contended) / 10, (turbo_l1, contended[:20])
