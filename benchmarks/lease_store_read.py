"""What sharing Turbo leases costs a request: a request carrying ``X-Turbogate-Lease`` reads its
lease from the store before its tier is resolved (gateway/lease_share.py).  This times that one
read, and a heartbeat's read plus compare-and-set write, against SQLite (WAL) and a private
redis-server, in one process.

Prints ONE JSON object: per store, the median wall and CPU microseconds of each call.
Run: ``python benchmarks/lease_store_read.py [--calls 3000]``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from turbogate.store.base import LeaseRecord, Store
from turbogate.store.redis_store import RedisStore
from turbogate.store.redisproc import RedisServer
from turbogate.store.sqlite import SqliteStore


async def timed(call: Callable[[], Awaitable[Any]], n: int) -> dict[str, float]:
    for _ in range(min(200, n)):  # warm: connections, statements, scripts
        await call()
    wall, cpu = [], []
    for _ in range(5):
        t, c = time.perf_counter(), time.process_time()
        for _ in range(n // 5):
            await call()
        wall.append((time.perf_counter() - t) / (n // 5) * 1e6)
        cpu.append((time.process_time() - c) / (n // 5) * 1e6)
    return {"wall_us": round(statistics.median(wall), 1), "cpu_us": round(statistics.median(cpu), 1)}


async def measure(store: Store, n: int) -> dict[str, Any]:
    await store.open()
    now = time.time()
    rec = LeaseRecord("lease_bench", "acme", now, now + 900, now, 0, now + 3600)
    await store.put_turbo_lease(rec, None, now)

    async def heartbeat() -> None:
        got = await store.turbo_lease("lease_bench")
        assert got is not None
        ok = await store.put_turbo_lease(dataclasses.replace(got, last_heartbeat=time.time()), got.version, now)
        assert ok

    out = {"read": await timed(lambda: store.turbo_lease("lease_bench"), n),
           "heartbeat": await timed(heartbeat, n)}
    await store.close()
    return out


async def main(n: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="lease-bench-"))
    out: dict[str, Any] = {"calls": n, "sqlite": await measure(SqliteStore(folder / "state.db"), n)}
    with RedisServer(folder / "redis") as server:
        out["redis"] = await measure(RedisStore(server.url, prefix="bench"), n)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls timed per figure (5 rounds, median)")
    print(json.dumps(asyncio.run(main(parser.parse_args().calls))))
