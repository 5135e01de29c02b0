"""gateway/lease_share.py over real stores, no HTTP: two processes' books sharing one store agree,
racing heartbeats renew a term once (compare-and-set), and with the store unreachable each
process keeps its leases locally."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from turbogate.gateway.lease_share import SharedLeases
from turbogate.sched.leases import LeaseBook, LeaseExpired, LeasePolicy, LeaseState, TooManyLeases, UnknownLease
from turbogate.store import MemoryStore
from turbogate.store.base import StoreUnavailable
from turbogate.store.redis_store import RedisStore
from turbogate.store.resilient import ResilientStore
from turbogate.store.sqlite import SqliteStore

POLICY = LeasePolicy(duration_s=100.0, renew_below_s=30.0, renew_by_s=50.0, warn_after_s=9.0, expire_after_s=12.0,
                     max_per_tenant=2)


class Yielding(MemoryStore):
    """A memory store whose calls give the event loop a turn, as a network store's do (races show)."""

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name.startswith("_") or not asyncio.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any) -> Any:
            await asyncio.sleep(0)
            return await attr(*args)
        return call


def process(store: Any, tmp_path: Path) -> SharedLeases:
    return SharedLeases(LeaseBook(POLICY), ResilientStore(store, tmp_path / "buf", timeout_s=0.5))


async def test_two_processes_share_grant_heartbeat_and_expiry(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    await store.open()
    a, b = process(store, tmp_path), process(store, tmp_path)
    t = time.perf_counter()
    lease = await a.grant("l1", "acme", t)
    assert (await b.get("l1", "acme", t + 1)).state is LeaseState.ACTIVE
    with pytest.raises(UnknownLease):
        await b.get("l1", "beta", t + 1)  # another tenant's lease is unknown
    await b.heartbeat("l1", "acme", t + 10)  # only b hears from the client
    await a.refresh("l1", t + 20)
    assert a.book.check("l1", "acme", t + 20) is None  # a would have expired it at t + 12 alone
    assert a.book.check("l1", "acme", t + 23) == "lease_expired"  # silent since t + 10
    with pytest.raises(LeaseExpired):
        await a.heartbeat("l1", "acme", t + 23)
    # max_per_tenant counts the leases granted through every process.
    await b.grant("l2", "acme", t + 24)
    await a.grant("l3", "acme", t + 24)
    with pytest.raises(TooManyLeases):
        await b.grant("l4", "acme", t + 25)
    assert lease.id == "l1"
    await store.close()


async def test_racing_heartbeats_renew_the_term_once(tmp_path: Path) -> None:
    store = Yielding()
    a, b = process(store, tmp_path), process(store, tmp_path)
    t = time.perf_counter()
    await a.grant("l1", "acme", t)
    for i in range(8):  # heartbeats every 10 s: the term (100 s) is renewed by 50 s when under 30 s are left
        now = t + 10 * (i + 1)
        # b's heartbeat came first but its write lands second: it must not take the lease back in time.
        await asyncio.gather(a.heartbeat("l1", "acme", now + 0.5), b.heartbeat("l1", "acme", now))
        rec = await store.turbo_lease("l1")
        assert rec is not None and rec.last_heartbeat == pytest.approx(now + 0.5 + a._wall, abs=0.01), (i, rec)
    assert rec.renewals == 1, rec
    assert rec.term_ends_at - rec.granted_at == pytest.approx(150.0, abs=0.01)


def dead_redis_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"  # closed again: nothing listens there


async def test_store_down_keeps_leases_locally(tmp_path: Path) -> None:
    shared = process(RedisStore(dead_redis_url(), timeout_s=0.2), tmp_path)
    await shared.store.open()
    assert shared.store.degraded
    t = time.perf_counter()
    await shared.grant("l1", "acme", t)  # known to this process only
    await shared.refresh("l1", t + 5)
    _, renewed = await shared.heartbeat("l1", "acme", t + 10)
    assert shared.book.check("l1", "acme", t + 20) is None  # the local heartbeat counts
    assert shared.book.check("l1", "acme", t + 23) == "lease_expired"
    assert not renewed
    await shared.store.close()


class Switchable(MemoryStore):
    """A memory store that can be made unreachable (every call fails) and back."""

    def __init__(self, shared: MemoryStore) -> None:
        super().__init__()
        self.shared, self.down = shared, False

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_") or name in ("shared", "down"):
            return super().__getattribute__(name)
        attr = getattr(self.shared, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any) -> Any:
            if self.down:
                raise StoreUnavailable("down")
            return await attr(*args)
        return call


async def test_heartbeats_taken_while_the_store_was_down_are_written_back(tmp_path: Path) -> None:
    shared = MemoryStore()
    flaky = Switchable(shared)
    a, b = process(shared, tmp_path / "a"), process(flaky, tmp_path / "b")
    t = time.perf_counter()
    await a.grant("l1", "acme", t)
    await b.refresh("l1", t + 1)
    flaky.down = True  # b's clients keep heartbeating b, which cannot reach the store
    await b.heartbeat("l1", "acme", t + 8)
    await b.heartbeat("l1", "acme", t + 16)
    assert b.store.degraded and b.book.check("l1", "acme", t + 20) is None
    await a.refresh("l1", t + 20)
    assert a.book.check("l1", "acme", t + 20) == "lease_expired"  # a saw no heartbeat since t
    flaky.down = False
    assert await b.store.recover()
    await b.heartbeat("l1", "acme", t + 24)  # b's times are newer than the store's: they are written
    await a.refresh("l1", t + 25)
    assert a.book.check("l1", "acme", t + 25) is None
