"""The gateway's view of its store, which may be down.

While the shared store answers, every call goes to it.  When a call fails (or times out) the
store is marked down: usage records go to a local append-only file (one ``os.write`` per batch,
which a SIGKILL cannot undo), tenant limits are held by a local ``MemoryStore`` (each process
then enforces them alone), one warning is logged per ``retry_interval_s``, and ``/ready`` says
``degraded``.  ``recover()`` (called every interval) pings the store and, once it answers,
replays the buffered records (the stores skip records they already hold) and returns to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import orjson

from turbogate.sched.metering import LimitPolicy, LimitRefusal, UsageRecord
from turbogate.store.base import (
    Budgets,
    JobRecord,
    LeaseRecord,
    Spent,
    Store,
    StoreUnavailable,
)
from turbogate.store.memory import MemoryStore
from turbogate.store.records import record_from_json, record_to_json

log = logging.getLogger("turbogate.store")
T = TypeVar("T")
_REPLAY_BATCH = 500


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class UsageBuffer:
    """Usage records waiting for the store, one JSON line each, in ``<dir>/usage-<pid>.jsonl``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / f"usage-{os.getpid()}.jsonl"
        self._fd: int | None = None

    def append(self, records: Sequence[UsageRecord]) -> None:
        if self._fd is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        lines = b"".join(record_to_json(r) + b"\n" for r in records)
        os.write(self._fd, lines)

    def claim(self) -> list[Path]:
        """This process's buffer, and the buffers and usage journals (``usage-<pid>-j<n>``,
        store/journal.py) of processes that are gone (a crashed worker's).  This process's own
        journal is its writer's."""
        if not self.folder.is_dir():
            return []
        out = []
        for p in sorted(self.folder.glob("usage-*.jsonl")):
            pid, _, journal = p.stem.removeprefix("usage-").partition("-")
            if not pid.isdigit() or (journal and not journal.startswith("j")):
                continue
            if (int(pid) == os.getpid() and not journal) or (int(pid) != os.getpid() and not _alive(int(pid))):
                out.append(p)
        return out

    def close_own(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def read(path: Path) -> list[UsageRecord]:
        recs = []
        for line in path.read_bytes().splitlines():
            try:
                recs.append(record_from_json(line))
            except (orjson.JSONDecodeError, KeyError):  # cut short by a crash mid-write: its response never ended
                continue
        return recs


class ResilientStore:
    def __init__(self, primary: Store, buffer_dir: Path, retry_interval_s: float = 1.0,
                 timeout_s: float = 1.0, name: str = "store") -> None:
        self.primary = primary
        self.local = MemoryStore()
        self.buffer = UsageBuffer(buffer_dir)
        self.retry_interval_s = retry_interval_s
        self.timeout_s = timeout_s
        self.name = name
        self.degraded = False
        self.buffered = 0  # records written to the local buffer since start
        self.replayed = 0
        self.lost = 0  # records neither stored nor buffered (no store and no writable disk)
        self._logged_at = -1e18
        self._local_leases: set[str] = set()

    async def _try(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await asyncio.wait_for(call, self.timeout_s)
        except (StoreUnavailable, TimeoutError) as exc:
            self._down(what, exc)
            raise StoreUnavailable(f"{self.name}: {what}: {self._why(exc)}") from exc

    def _down(self, what: str, exc: BaseException) -> None:
        self.degraded = True
        now = time.monotonic()
        if now - self._logged_at >= self.retry_interval_s:
            self._logged_at = now
            log.warning("%s unreachable (%s: %s): serving within local limits, buffering usage in %s",
                        self.name, what, self._why(exc), self.buffer.path)

    def _why(self, exc: BaseException) -> str:
        # A timeout's message is empty (and the exception itself is truthy): say what happened.
        return str(exc) or f"no answer in {self.timeout_s:g} s"

    async def open(self) -> None:
        try:
            await self._try("open", self.primary.open())
        except StoreUnavailable:
            return
        await self._replay()

    async def close(self) -> None:
        self.buffer.close_own()
        await self.primary.close()

    async def add_usage(self, records: Sequence[UsageRecord]) -> Spent:
        if not self.degraded:
            try:
                return await self._try("add usage", self.primary.add_usage(records))
            except StoreUnavailable:
                pass
        try:
            self.buffer.append(records)
        except OSError as exc:  # no store and no disk: serving goes on, and the loss is counted and logged
            self.lost += len(records)
            log.error("%d usage records lost: the store is unreachable and the buffer %s cannot be written (%s)",
                      len(records), self.buffer.path, exc)
            return {}
        self.buffered += len(records)
        return {}  # the flow's own charges keep the budget until the store answers again

    async def acquire(self, tenant: str, limits: LimitPolicy, lease: str, ts: float,
                      lease_s: float) -> LimitRefusal | None:
        if not self.degraded:
            try:
                return await self._try("acquire", self.primary.acquire(tenant, limits, lease, ts, lease_s))
            except StoreUnavailable:
                pass
        self._local_leases.add(lease)
        return await self.local.acquire(tenant, limits, lease, ts, lease_s)

    async def release(self, tenant: str, lease: str, tokens: int, ts: float) -> None:
        if lease in self._local_leases:
            self._local_leases.discard(lease)
            await self.local.release(tenant, lease, tokens, ts)
            return
        if not self.degraded:
            with contextlib.suppress(StoreUnavailable):  # a lease the store cannot take back expires by itself
                await self._try("release", self.primary.release(tenant, lease, tokens, ts))

    async def usage(self, tenant: str | None, since: float, until: float) -> list[UsageRecord]:
        return await self._try("usage", self.primary.usage(tenant, since, until))

    async def spent(self, tenant: str, key: str) -> float:
        return await self._try("spent", self.primary.spent(tenant, key))

    async def budgets(self) -> Budgets:
        return await self._try("budgets", self.primary.budgets())

    async def set_budget(self, tenant: str, units: float | None, period: str) -> None:
        await self._try("set budget", self.primary.set_budget(tenant, units, period))

    async def switches(self) -> dict[str, bool]:
        return await self._try("switches", self.primary.switches())

    async def set_switch(self, name: str, on: bool) -> None:
        await self._try("set switch", self.primary.set_switch(name, on))

    async def learned_limits(self) -> dict[str, str]:
        return await self._try("learned limits", self.primary.learned_limits())

    async def put_learned_limits(self, limits: Mapping[str, str]) -> None:
        await self._try("put learned limits", self.primary.put_learned_limits(limits))

    # ---- Turbo leases and jobs: while the store is down, the caller keeps them locally ----------
    async def _shared(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """On the request path: with the store known down, fail at once rather than wait for a
        timeout on every request (``recover`` finds out when it is back)."""
        if self.degraded:
            raise StoreUnavailable(f"{self.name}: {what}: unreachable")
        return await self._try(what, call())

    async def turbo_lease(self, lease_id: str) -> LeaseRecord | None:
        return await self._shared("turbo lease", lambda: self.primary.turbo_lease(lease_id))

    async def turbo_leases(self, tenant: str, ts: float) -> list[LeaseRecord]:
        return await self._shared("turbo leases", lambda: self.primary.turbo_leases(tenant, ts))

    async def put_turbo_lease(self, rec: LeaseRecord, expect_version: int | None, ts: float) -> bool:
        return await self._shared("put turbo lease", lambda: self.primary.put_turbo_lease(rec, expect_version, ts))

    async def job(self, job_id: str) -> JobRecord | None:
        return await self._shared("job", lambda: self.primary.job(job_id))

    async def put_job(self, rec: JobRecord, forget_at: float, ts: float) -> None:
        await self._shared("put job", lambda: self.primary.put_job(rec, forget_at, ts))

    async def request_job_cancel(self, job_id: str) -> bool:
        return await self._shared("cancel job", lambda: self.primary.request_job_cancel(job_id))

    async def job_cancels(self, job_ids: Sequence[str]) -> set[str]:
        return await self._shared("job cancels", lambda: self.primary.job_cancels(job_ids))

    async def recover(self) -> bool:
        """Ping a down store; once it answers, replay the buffer and use it again."""
        if not self.degraded:
            return True
        try:
            await self._try("ping", self.primary.ping())
        except StoreUnavailable:
            return False
        self.degraded = False
        n = await self._replay()
        log.warning("%s is back: %d buffered usage records replayed", self.name, n)
        return not self.degraded

    async def _replay(self) -> int:
        self.buffer.close_own()
        n = 0
        for path in self.buffer.claim():
            recs = UsageBuffer.read(path)
            try:
                for i in range(0, len(recs), _REPLAY_BATCH):
                    await self._try("replay", self.primary.add_usage(recs[i:i + _REPLAY_BATCH]))
            except StoreUnavailable:
                return n  # down again: the file stays for the next try (replays are idempotent)
            path.unlink(missing_ok=True)
            n += len(recs)
        self.replayed += n
        return n
