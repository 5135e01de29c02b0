"""Group commit: usage records submitted while a write is under way go to the store together
in the next write, and each submitter waits for the write holding its record.  The gateway
awaits it before a response's final byte, so a record is stored (or buffered on local disk)
before the client has the whole answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from turbogate.sched.metering import UsageRecord
from turbogate.store.base import Spent
from turbogate.store.resilient import ResilientStore


class UsageWriter:
    def __init__(self, store: ResilientStore, on_spent: Callable[[Spent], None]) -> None:
        self.store = store
        self.on_spent = on_spent
        self._pending: list[tuple[UsageRecord, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    def submit(self, rec: UsageRecord) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._pending.append((rec, fut))
        if self._task is None:
            self._task = loop.create_task(self._flush())
        return fut

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    spent = await self.store.add_usage([b[0] for b in batch])
                except Exception as exc:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                if spent:
                    self.on_spent(spent)
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(None)
        finally:
            self._task = None

    async def drain(self) -> None:
        while self._task is not None:
            await asyncio.shield(self._task)
