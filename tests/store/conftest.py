"""A private, real redis-server per test module (started on a free port, stopped after)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from turbogate.store.redisproc import RedisServer


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server
