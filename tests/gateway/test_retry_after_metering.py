"""Every answer that says ``Retry-After`` is counted once in ``turbogate_shed_total``, by its
code and the rule that refused it: a tenant over its rate is not counted as L1 overload, a pool
with no healthy replica is an outage, and uvicorn's own connection cap answers the OpenAI error
with a Retry-After instead of a bare 503, and is counted too.  Real processes on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, replica_state, wait_for
from turbogate.config import hash_key
from turbogate.procs import Service, free_port, start_emulator, wait_healthy
from turbogate.sched.refusals import BY_HEALTH, BY_L1, BY_OTHER, BY_TENANT_LIMITS, refused_by

CHAT = "/v1/chat/completions"
ONE_A_MINUTE = "sk-one-a-minute"
DEAD_MODEL = "dead-model"


def test_each_refusal_code_names_its_rule() -> None:
    assert {c: refused_by(c) for c in ("queue_full", "queue_time_budget", "queue_timeout", "tenant_share")} \
        == dict.fromkeys(("queue_full", "queue_time_budget", "queue_timeout", "tenant_share"), BY_L1)
    assert {refused_by(c) for c in ("tenant_limit", "tenant_rate_limit", "tenant_token_limit")} == {BY_TENANT_LIMITS}
    assert refused_by("no_healthy_replica") == BY_HEALTH
    assert refused_by("something_new") == BY_OTHER


def sheds(url: str) -> dict[tuple[str, str], float]:
    """``(reason, by)`` → count, from the gateway's /metrics."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return {(s.labels["reason"], s.labels["by"]): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "turbogate_shed_total"}


def requests_with(url: str, status: int) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "turbogate_requests_total" and s.labels["status"] == str(status))


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = start_emulator("--time-scale", "1", "--model", MODEL, log_dir=tmp_path_factory.mktemp("emu"))
    yield svc
    svc.stop()


def _config(emulator: Service) -> dict[str, Any]:
    nothing_listens = f"http://127.0.0.1:{free_port()}"
    cfg = gateway_config([pool("p", [MODEL], [emulator.url]), pool("dead", [DEAD_MODEL], [nothing_listens])])
    cfg["tenants"].append({"name": "slow", "key_sha256": hash_key(ONE_A_MINUTE), "tiers": ["standard"],
                           "requests_per_minute": 1})
    return cfg


def _chat(url: str, key: str, model: str = MODEL, **extra: Any) -> httpx.Response:
    return httpx.post(url + CHAT, headers={"Authorization": f"Bearer {key}"}, timeout=30,
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                            **extra})


def test_sheds_are_counted_by_their_rule(emulator: Service,
                                         gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    cfg = _config(emulator)
    gw = gateway_factory(cfg)
    dead = cfg["pools"][1]["replicas"][0]["url"]
    wait_for(lambda: replica_state(gw.url, dead)["ejections"] >= 1, what="the dead replica's ejection")

    down = _chat(gw.url, KEY, DEAD_MODEL)
    assert down.status_code == 503 and down.json()["error"]["code"] == "no_healthy_replica"
    assert int(down.headers["retry-after"]) >= 1

    assert _chat(gw.url, ONE_A_MINUTE).status_code == 200
    over = _chat(gw.url, ONE_A_MINUTE)  # a minute turning between the two gives a 200: tried once more
    if over.status_code == 200:
        over = _chat(gw.url, ONE_A_MINUTE)
    assert over.status_code == 429 and over.json()["error"]["code"] == "tenant_rate_limit"
    assert int(over.headers["retry-after"]) >= 1

    counted = sheds(gw.url)
    assert counted == {("no_healthy_replica", BY_HEALTH): 1.0, ("tenant_rate_limit", BY_TENANT_LIMITS): 1.0}


def test_the_http_servers_connection_cap_answers_retry_after_and_is_counted(emulator: Service,
                                                                           tmp_path: Path) -> None:
    """uvicorn run with ``--limit-concurrency 2`` and the gateway's protocol: an idle connection
    holds one place, the request's own connection the second, so the request is over the cap."""
    config = tmp_path / "gw.yaml"
    config.write_text(yaml.safe_dump(_config(emulator)))
    port = free_port()
    log = tmp_path / "uvicorn.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "turbogate.gateway.app:app_from_env",
         "--http", "turbogate.gateway.guard:GuardedHttpToolsProtocol", "--limit-concurrency", "2",
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env={**os.environ, "TURBOGATE_CONFIG": str(config)})
    url = f"http://127.0.0.1:{port}"
    with Service("uvicorn", url, process, log):
        wait_healthy(url, process)
        before = requests_with(url, 503)
        # Connected first, so accepted first: the server counts it before the request's connection.
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            refused = _chat(url, KEY)
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "over_concurrency"
            assert int(refused.headers["retry-after"]) >= 1
        # The idle connection closed: /metrics gets a place again once the server has let it go.
        wait_for(lambda: httpx.get(url + "/metrics", timeout=10).status_code == 200, what="a free place")
        assert sheds(url).get(("over_concurrency", "http")) == 1.0
        assert requests_with(url, 503) - before == 1.0
