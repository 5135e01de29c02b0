"""Usage records on their way to the store.

With a journal (a persistent store: SQLite or Redis), a record is appended to this process's
journal on local disk when submitted (store/journal.py) — durable from then on, so the gateway
need not wait before the answer's last byte — and the records reach the store in one batch per
``flush_s`` (or at once when ``max_batch`` are waiting).  A store transaction per record cost
more CPU than the rest of a small request's path through the gateway (about 45 µs for one record
in SQLite, 5-7 µs each in batches of 64-256: benchmarks/gateway_ab.py, docs/gateway.md "Speed").
A record that charges a tenant's Turbo budget (the caller says so: ``BudgetBook.spends_budget``),
and any record while the journal cannot be written, goes to the store at once and its submitter
waits for that write (group commit: records submitted meanwhile go together in the next write):
the store's running total is how every process learns a budget's spend.  A Turbo record of a
tenant without a budget waits for nothing: the priority tier does not pay a store write per
answer for a budget that is not there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from turbogate.sched.metering import UsageRecord
from turbogate.store.base import Spent
from turbogate.store.journal import UsageJournal
from turbogate.store.resilient import ResilientStore

log = logging.getLogger("turbogate.store")

#: How long a journaled record may wait for the store: its delay before usage reads and other
#: processes see it (a read through this process's usage API flushes first).
FLUSH_S = 0.02
MAX_BATCH = 256


class UsageWriter:
    def __init__(self, store: ResilientStore, on_spent: Callable[[Spent], None], journal: UsageJournal | None = None,
                 flush_s: float = FLUSH_S, max_batch: int = MAX_BATCH) -> None:
        self.store = store
        self.on_spent = on_spent
        self.journal = journal
        self.flush_s = flush_s
        self.max_batch = max_batch
        self._pending: list[tuple[UsageRecord, asyncio.Future[None] | None]] = []
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._journal_failed_logged = False

    def submit(self, rec: UsageRecord, spends_budget: bool = False) -> asyncio.Future[None] | None:
        """Take ``rec``; None when it is already durable (journaled, or a memory store, which has
        nothing to make durable) and need not reach the store first, else a future done once the
        store or its buffer holds it.  ``spends_budget``: ``rec`` charges a tenant's Turbo budget."""
        fut: asyncio.Future[None] | None = None
        if spends_budget:
            # It goes to the store at once and its answer waits for it: the store's running total
            # is how this and every other process learn the spend, and 20 ms of batching let two
            # gateways overspend a budget by 2× (tests/store/test_gateways.py).  It is journaled
            # too, so a crash before the write loses nothing.
            fut = asyncio.get_running_loop().create_future()
        if self.journal is not None:
            try:
                self.journal.append(rec)
            except OSError as exc:
                if not self._journal_failed_logged:
                    self._journal_failed_logged = True
                    log.error("usage journal in %s cannot be written (%s): records go to the store one write "
                              "at a time", self.journal.folder, exc)
                if fut is None:
                    fut = asyncio.get_running_loop().create_future()
        self._pending.append((rec, fut))
        if fut is not None or len(self._pending) >= self.max_batch:
            self._kick()
        elif self._timer is None and self._task is None:
            self._timer = asyncio.get_running_loop().call_later(self.flush_s, self._kick)
        return fut

    def _kick(self) -> None:
        self._timer = None
        if self._task is None and self._pending:
            self._task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                journal = self.journal
                done_with = journal.rotate() if journal is not None else []
                try:
                    spent = await self.store.add_usage([b[0] for b in batch])
                except Exception as exc:  # a bug: the journal files stay, replayed after this process
                    log.error("%d usage records not stored: %s", len(batch), exc)
                    if journal is not None:
                        journal.keep(done_with)
                    for _, fut in batch:
                        if fut is not None and not fut.done():
                            fut.set_exception(exc)
                    continue
                try:
                    # Stored, or in the store's own buffer while it is down: the journal's copies can go.
                    if journal is not None:
                        journal.release(done_with)
                    if spent:
                        self.on_spent(spent)
                finally:  # nobody waiting for these records may be left waiting
                    for _, fut in batch:
                        if fut is not None and not fut.done():
                            fut.set_result(None)
                if not any(f is not None for _, f in self._pending) and len(self._pending) < self.max_batch:
                    break  # the rest waits for its own timer
        finally:
            self._task = None
            if self._pending and self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(self.flush_s, self._kick)

    async def close(self) -> None:
        """Shut down: every record to the store, then the journal's files go."""
        await self.flush()
        if self.journal is not None:
            self.journal.close()

    async def flush(self) -> None:
        """Every record submitted so far in the store (a usage read, shutdown)."""
        while self._pending or self._task is not None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._flush())
            await asyncio.shield(self._task)
