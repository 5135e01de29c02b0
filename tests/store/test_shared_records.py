"""Turbo leases and L4 jobs in each store (memory, SQLite, a real redis-server): the store keeps
a lease's times under compare-and-set and a job's view with a cancel asked elsewhere."""

from __future__ import annotations

import dataclasses
import time

from tests.store.test_stores import store  # noqa: F401  (the fixture: one test per store)
from turbogate.store import Store
from turbogate.store.base import JobRecord, LeaseRecord


async def test_lease_records_compare_and_set(store: Store) -> None:  # noqa: F811
    now = time.time()
    rec = LeaseRecord("lease_a", "acme", now, now + 900, now, 0, now + 3600)
    assert await store.turbo_lease("lease_a") is None
    assert await store.put_turbo_lease(rec, None, now)
    assert not await store.put_turbo_lease(rec, None, now)  # a second grant of the same id loses
    got = await store.turbo_lease("lease_a")
    assert got == dataclasses.replace(rec, version=1)
    beat = dataclasses.replace(rec, last_heartbeat=now + 30, renewals=1, term_ends_at=now + 1800)
    assert await store.put_turbo_lease(beat, 1, now + 30)
    assert not await store.put_turbo_lease(beat, 1, now + 30)  # written from a stale read: refused
    assert await store.turbo_lease("lease_a") == dataclasses.replace(beat, version=2)
    other = LeaseRecord("lease_b", "beta", now, now + 900, now, 0, now + 3600)
    assert await store.put_turbo_lease(other, None, now)
    assert [r.id for r in await store.turbo_leases("acme", now)] == ["lease_a"]
    # A record past its forget_at is not listed, and goes at the next write.
    gone = LeaseRecord("lease_c", "acme", now - 10, now - 5, now - 10, 0, now - 1)
    assert await store.put_turbo_lease(gone, None, now - 2)
    assert [r.id for r in await store.turbo_leases("acme", now)] == ["lease_a"]
    await store.put_turbo_lease(LeaseRecord("lease_d", "acme", now, now + 9, now, 0, now + 60), None, now)
    assert await store.turbo_lease("lease_c") is None


async def test_job_views_and_cancel_requests(store: Store) -> None:  # noqa: F811
    now = time.time()
    assert await store.job("job_x") is None
    assert not await store.request_job_cancel("job_x")
    await store.put_job(JobRecord("job_x", "acme", "gw-1", b'{"status":"running"}'), now + 3600, now)
    await store.put_job(JobRecord("job_y", "acme", "gw-1", b'{"status":"running"}'), now + 3600, now)
    assert await store.job_cancels(["job_x", "job_y", "job_z"]) == set()
    assert await store.request_job_cancel("job_x")
    assert await store.job_cancels(["job_x", "job_y", "job_z"]) == {"job_x"}
    # The owner writes its view again: the cancel asked meanwhile stays asked.
    await store.put_job(JobRecord("job_x", "acme", "gw-1", b'{"status":"succeeded"}'), now + 3600, now)
    got = await store.job("job_x")
    assert got == JobRecord("job_x", "acme", "gw-1", b'{"status":"succeeded"}', True)
    await store.put_job(JobRecord("job_old", "acme", "gw-1", b"{}"), now - 1, now - 2)
    await store.put_job(JobRecord("job_y", "acme", "gw-1", b'{"status":"failed"}'), now + 3600, now)
    assert await store.job("job_old") is None  # past its forget_at
    assert await store.job_cancels([]) == set()
