"""Gateway test helpers: write a config for real emulators and start ``turbogate serve``."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from turbogate.config import hash_key
from turbogate.procs import Service, start_emulator, start_gateway

MODEL = "llama-3.1-8b"
KEY = "sk-acme-test"  # entitled to every tier
BASIC_KEY = "sk-basic-test"  # standard + relax only
TINY_KEY = "sk-tiny-test"  # one request at a time
ADMIN = "admin-secret-token"


def gateway_config(pools: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "admin": {"token_sha256": hash_key(ADMIN)},
        "tenants": [
            {"name": "acme", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]},
            {"name": "basic", "key_sha256": [hash_key(BASIC_KEY)], "tiers": ["standard", "relax"]},
            {"name": "tiny", "key_sha256": hash_key(TINY_KEY), "tiers": ["turbo", "standard"], "max_in_flight": 1},
        ],
        "pools": pools,
        "scrape": {"interval_s": 0.2, "stale_after_s": 3.0, "timeout_s": 1.0},
        "health": {"interval_s": 0.2, "eject_after_failures": 2, "probe_backoff_s": 0.2, "probe_backoff_max_s": 1.0},
    }
    cfg.update(overrides)
    return cfg


def pool(name: str, models: list[str], urls: list[str], max_concurrency: int = 32, **extra: Any) -> dict[str, Any]:
    return {"name": name, "models": models,
            "replicas": [{"url": u, "engine": "emulator", "max_concurrency": max_concurrency} for u in urls], **extra}


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """An instant emulator of ``MODEL`` (--time-scale 0), shared by a module's tests."""
    svc = start_emulator("--time-scale", "0", "--model", MODEL, log_dir=tmp_path_factory.mktemp("emu"))
    yield svc
    svc.stop()


@contextmanager
def gateways(folder: Path) -> Iterator[Callable[[dict[str, Any]], Service]]:
    """``make(config)`` starts a gateway from ``config`` (written under ``folder``); all stop on exit."""
    started: list[Service] = []

    def make(config: dict[str, Any]) -> Service:
        path = folder / f"gateway-{len(started)}.yaml"
        path.write_text(yaml.safe_dump(config))
        svc = start_gateway(path, "--log-level", "info", log_dir=folder / "logs")
        started.append(svc)
        return svc

    try:
        yield make
    finally:
        for svc in started:
            svc.stop()


@pytest.fixture(scope="module")
def gateway_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[dict[str, Any]], Service]]:
    with gateways(tmp_path_factory.mktemp("gateway")) as make:
        yield make


@contextmanager
def held_stream(url: str, key: str = KEY, model: str = MODEL, max_tokens: int = 3000) -> Iterator[httpx.Response]:
    """A streamed completion of ``max_tokens`` tokens at ``url`` (a gateway or an engine), read no further
    and held open for the block, so it holds its slot."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=120) as client, client.stream(
            "POST", url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, json=body) as resp:
        yield resp


def admin_state(url: str, token: str = ADMIN) -> dict[str, Any]:
    req = urllib.request.Request(url + "/admin/state", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        state: dict[str, Any] = orjson.loads(resp.read())
    return state


def replica_state(url: str, replica_url: str) -> dict[str, Any]:
    return next(r for r in admin_state(url)["replicas"] if r["id"] == replica_url)


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition",
             detail: Callable[[], str] | None = None) -> None:
    """Poll until ``predicate()`` holds (a correctness wait with a deadline, not a speed assertion);
    ``detail()`` adds what was seen to the failure message."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}" + (f"; {detail()}" if detail else ""))


def server_timing(value: str) -> dict[str, float]:
    out = {}
    for part in value.split(","):
        name, _, dur = part.strip().partition(";dur=")
        out[name] = float(dur)
    return out
