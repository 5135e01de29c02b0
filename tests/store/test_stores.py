"""One contract, three stores: memory, SQLite (WAL) and a real redis-server."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from turbogate.gateway.usage_scan import take_json_usage, take_stream_usage
from turbogate.sched import Flow
from turbogate.sched.metering import LimitPolicy, UsageRecord, period_key
from turbogate.store import MemoryStore, Store, summarize
from turbogate.store.base import Spent
from turbogate.store.records import record_from_json, record_to_json
from turbogate.store.redis_store import RedisStore
from turbogate.store.redisproc import RedisServer
from turbogate.store.resilient import ResilientStore
from turbogate.store.sqlite import SqliteStore

_prefixes = itertools.count()


def rec(i: int, tenant: str = "acme", tier: str = "turbo", units: float = 10.0, ts: float = 1000.0) -> UsageRecord:
    return UsageRecord(tenant, "m", "turbo", tier, 200, 3, 2, 0.01, 0.2, units, None, 0.0, ts + i, f"g-{i}")


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store
    if request.param == "memory":
        s = MemoryStore()
    elif request.param == "sqlite":
        s = SqliteStore(tmp_path / "state.sqlite3")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        s = RedisStore(server.url, prefix=f"t{next(_prefixes)}")
    await s.open()
    yield s
    await s.close()


async def test_usage_is_stored_once_and_charges_turbo_spend(store: Store) -> None:
    records = [rec(0), rec(1, tier="standard"), rec(2, tenant="beta")]
    spent = await store.add_usage(records)
    day = period_key(1000.0, "day")
    assert spent[("acme", day)] == 10.0 and spent[("beta", day)] == 10.0
    assert {k for _, k in spent} == {period_key(1000.0, p) for p in ("hour", "day", "week", "month")}
    again = await store.add_usage(records)  # a replay: nothing new
    assert again == {}
    assert await store.spent("acme", day) == 10.0
    assert await store.spent("acme", period_key(1000.0, "month")) == 10.0
    got = await store.usage("acme", 0, 2000)
    assert [r.id for r in got] == ["g-0", "g-1"] and got[0] == records[0]
    assert [r.id for r in await store.usage(None, 1001, 1002.5)] == ["g-1", "g-2"]
    rows = summarize(await store.usage(None, 0, 2000))
    assert [(r["tenant"], r["tier"], r["requests"], r["cost_units"]) for r in rows] == [
        ("acme", "standard", 1, 10.0), ("acme", "turbo", 1, 10.0), ("beta", "turbo", 1, 10.0)]


async def test_budgets_and_switches(store: Store) -> None:
    await store.set_budget("acme", 500.0, "day")
    await store.set_budget("beta", None, "month")
    assert await store.budgets() == {"acme": (500.0, "day"), "beta": (None, "month")}
    await store.set_switch("tier:turbo", False)
    await store.set_switch("tenant:acme", True)
    assert await store.switches() == {"tier:turbo": False, "tenant:acme": True}


async def test_limits_in_flight_requests_and_tokens(store: Store) -> None:
    lim = LimitPolicy(max_in_flight=2, requests_per_minute=3, tokens_per_minute=100)
    ts = 60.0 * 1000 + 5
    assert await store.acquire("acme", lim, "a", ts, 30) is None
    assert await store.acquire("acme", lim, "b", ts, 30) is None
    refused = await store.acquire("acme", lim, "c", ts, 30)
    assert refused is not None and refused.code == "tenant_limit"
    await store.release("acme", "a", 10, ts)
    assert await store.acquire("acme", lim, "c", ts, 30) is None  # the third request this minute
    await store.release("acme", "b", 10, ts)
    refused = await store.acquire("acme", lim, "d", ts, 30)
    assert refused is not None and refused.code == "tenant_rate_limit"
    assert await store.acquire("acme", lim, "d", ts + 60, 30) is None  # next minute; "c" still held
    await store.release("acme", "d", 200, ts + 60)
    refused = await store.acquire("acme", lim, "e", ts + 61, 30)
    assert refused is not None and refused.code == "tenant_token_limit"
    # a lease a crashed gateway never gave back ("c") expires
    assert await store.acquire("beta", lim, "x", ts, 30) is None
    assert await store.acquire("acme", LimitPolicy(max_in_flight=1), "f", ts + 200, 30) is None


async def test_two_sqlite_connections_share_one_limit(tmp_path: Path) -> None:
    a, b = SqliteStore(tmp_path / "s.db"), SqliteStore(tmp_path / "s.db")
    lim = LimitPolicy(max_in_flight=1)
    assert await a.acquire("acme", lim, "1", 100.0, 30) is None
    assert await b.acquire("acme", lim, "2", 100.0, 30) is not None
    await a.release("acme", "1", 0, 100.0)
    assert await b.acquire("acme", lim, "2", 100.0, 30) is None


async def test_redis_down_buffers_on_disk_and_replays(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        rs = ResilientStore(RedisStore(server.url, timeout_s=0.5), tmp_path / "buf", retry_interval_s=0.1,
                            timeout_s=0.5)
        await rs.open()
        await rs.add_usage([rec(0)])
        server.stop()
        assert await rs.add_usage([rec(1), rec(2)]) == {}
        assert rs.degraded and rs.buffered == 2
        lim = LimitPolicy(max_in_flight=1)  # local limits while down
        assert await rs.acquire("acme", lim, "a", 100.0, 30) is None
        assert await rs.acquire("acme", lim, "b", 100.0, 30) is not None
        assert not await rs.recover()
        server.start()
        assert await rs.recover()
        assert not rs.degraded and rs.replayed == 2
        assert [r.id for r in await rs.usage("acme", 0, 2000)] == ["g-0", "g-1", "g-2"]
        assert await rs.spent("acme", period_key(1000.0, "month")) == 30.0
        assert not list((tmp_path / "buf").glob("*.jsonl"))
        await rs.close()
    finally:
        server.stop()


async def test_a_store_that_does_not_answer_is_logged_as_such(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Hung(MemoryStore):
        async def add_usage(self, records: Sequence[UsageRecord]) -> Spent:
            await asyncio.Event().wait()  # never answers
            return {}

    rs = ResilientStore(Hung(), tmp_path / "buf", timeout_s=0.05, name="SQLite store x")
    await rs.open()
    with caplog.at_level("WARNING", logger="turbogate.store"):
        assert await rs.add_usage([rec(0)]) == {}  # buffered on disk, not lost
    assert rs.degraded and rs.buffered == 1
    assert "SQLite store x unreachable (add usage: no answer in 0.05 s)" in caplog.text


def test_token_counts_from_json_and_streams() -> None:
    from tests.sched.test_flow import new, policy

    req = new(Flow(policy()), 0.0, stream=True)
    take_json_usage(req, b'{"id":"x","usage":{"prompt_tokens":7,"total_tokens":12,"completion_tokens":5}}')
    assert (req.prompt_tokens, req.completion_tokens) == (7, 5)
    events = (b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\n'
              b'data: {"service_tier":"turbo","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}\n\n'
              b"data: [DONE]\n\n")
    kept = take_stream_usage(req, events, strip=False)
    assert kept == events and (req.prompt_tokens, req.completion_tokens) == (3, 9)
    stripped = take_stream_usage(req, events, strip=True)
    assert b'"usage":{' not in stripped and stripped.endswith(b"data: [DONE]\n\n") and b'"content":"a"' in stripped


def test_done_event_is_held_for_the_final_byte() -> None:
    from turbogate.gateway.usage_scan import hold_done

    assert hold_done(b'data: {"a":1}\n\ndata: [DONE]\n\n') == (b'data: {"a":1}\n\n', b"data: [DONE]\n\n")
    assert hold_done(b'data: {"a":1}\n\n') == (b'data: {"a":1}\n\n', b"")
    assert hold_done(b"data: [DONE]\n\n") == (b"", b"data: [DONE]\n\n")


_OLD_USAGE_TABLE = """CREATE TABLE usage (
  id TEXT PRIMARY KEY, ts REAL NOT NULL, tenant TEXT NOT NULL, model TEXT NOT NULL, tier_asked TEXT NOT NULL,
  tier_served TEXT NOT NULL, status INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL, queue_s REAL NOT NULL, latency_s REAL NOT NULL, cost_units REAL NOT NULL,
  downgrade TEXT);
CREATE INDEX usage_by_tenant_ts ON usage (tenant, ts);
CREATE INDEX usage_by_ts ON usage (ts);"""


@pytest.mark.parametrize("made_before", [False, True], ids=["new", "made-before"])
async def test_sqlite_usage_table_keyed_by_time_and_an_older_one_still_works(tmp_path: Path, made_before: bool) -> None:
    path = tmp_path / "state.sqlite3"
    if made_before:  # a database from before the usage table was keyed by (ts, id)
        with sqlite3.connect(path) as db:
            db.executescript(_OLD_USAGE_TABLE)
    s = SqliteStore(path)
    await s.open()
    try:
        records = [rec(2), rec(0, tenant="beta"), rec(1, tier="standard")]
        await s.add_usage(records)
        assert await s.add_usage(records[:1]) == {}  # a replay meets its own key...
        assert await s.add_usage([record_from_json(record_to_json(records[1]))]) == {}  # ...from a journal too
        assert [r.id for r in await s.usage(None, 0, 2000)] == ["g-0", "g-1", "g-2"]  # in time order
        assert [r.id for r in await s.usage("acme", 1000.5, 2000)] == ["g-1", "g-2"]
    finally:
        await s.close()
    with sqlite3.connect(path) as db:
        indexes = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='usage'")}
        sql = db.execute("SELECT sql FROM sqlite_master WHERE name='usage'").fetchone()[0]
    if made_before:
        assert "usage_by_ts" in indexes and "WITHOUT ROWID" not in sql
    else:
        assert indexes == set() and "PRIMARY KEY (ts, id)) WITHOUT ROWID" in sql
