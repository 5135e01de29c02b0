"""A Redis store that would lose usage records at a restart is warned about at start (issue 43,
point 7): the gateway reads the server's ``save`` and ``appendonly`` with ``CONFIG GET``.  On a
real redis-server whose settings are changed with ``CONFIG SET``, and on a real gateway's log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import yaml

from tests.gateway.conftest import MODEL, gateway_config, pool
from turbogate.procs import Service, start_gateway
from turbogate.store.redis_store import RedisStore, persistence_warning
from turbogate.store.redisproc import RedisServer


def test_the_rule() -> None:
    assert persistence_warning("", "yes") is None
    assert persistence_warning("3600 1", "yes") is None
    nothing = persistence_warning("", "no")
    assert nothing is not None and "loses every usage record" in nothing and "--appendonly yes" in nothing
    snapshots = persistence_warning("3600 1 300 100", "no")
    assert snapshots is not None and "since the last" in snapshots and "3600 1 300 100" in snapshots


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as srv:
        yield srv


def _set(server: RedisServer, save: str, appendonly: str) -> None:
    client = redis.Redis.from_url(server.url)
    client.config_set("appendonly", appendonly)
    client.config_set("save", save)
    client.close()


def _durability(server: RedisServer) -> str | None:
    async def read() -> str | None:
        store = RedisStore(server.url)
        try:
            return await store.durability()
        finally:
            await store.close()

    return asyncio.run(read())


def test_the_store_reads_the_servers_settings(server: RedisServer) -> None:
    assert _durability(server) is None  # redisproc's server keeps an append-only file
    _set(server, "", "no")  # the probe's redis-server --save ''
    why = _durability(server)
    assert why is not None and "keeps nothing" in why
    _set(server, "900 1", "no")
    why = _durability(server)
    assert why is not None and "only snapshots" in why


def test_the_gateway_warns_at_start(server: RedisServer, emulator_factory: Callable[..., Service],
                                    tmp_path: Path) -> None:
    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(gateway_config([pool("main", [MODEL], [emu.url])],
                                                  store={"kind": "redis", "url": server.url})))
    with start_gateway(path, "--log-level", "info", log_dir=tmp_path / "logs-durable") as gw:
        pass  # started: its start-up is over
    assert "keeps nothing" not in gw.log_text() and "only snapshots" not in gw.log_text()
    _set(server, "", "no")
    with start_gateway(path, "--log-level", "info", log_dir=tmp_path / "logs-volatile") as gw:
        pass
    warning = [line for line in gw.log_text().splitlines() if "keeps nothing on disk" in line]
    assert warning and "WARNING" in warning[0].upper() and server.url in warning[0]
