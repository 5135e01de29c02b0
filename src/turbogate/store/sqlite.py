"""SQLite in WAL mode: the zero-setup store, durable across restarts and shared by the worker
processes of one host.  Each call is one short transaction (``BEGIN IMMEDIATE`` where it must
read and write atomically); ``synchronous=NORMAL`` in WAL mode keeps every committed record
through a process crash (SIGKILL), which is the durability the gateway promises."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from turbogate.errors import TurbogateError
from turbogate.sched.metering import LimitPolicy, LimitRefusal, UsageRecord, limit_refusal, minute_of, spend_keys
from turbogate.store.base import Budgets, JobRecord, LeaseRecord, Spent, StoreUnavailable

T = TypeVar("T")


_INSERT_USAGE = "INSERT OR IGNORE INTO usage VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
_MORE_ROWS = ",(?,?,?,?,?,?,?,?,?,?,?,?,?)"
_ROWS_PER_INSERT = 128  # 13 × 128 parameters, well under SQLite's limit of 32,766


class _Busy(TurbogateError):
    """The database is locked by another connection (the fast path then hands over to the thread)."""

# The usage table is one B-tree kept in time order, (ts, id), and nothing else: every request
# writes a row, and each extra index cost about as much again (6.4 µs a row with the id key and
# two time indexes, 2.5-4 µs like this; docs/gateway.md, "Tenth pass").  A record's ts and id are
# fixed before it is first stored, so a replayed record still meets its own key (INSERT OR
# IGNORE).  A report reads its time window from the key and filters the tenant as it goes.
# A database whose table has other indexes works as it is: same columns, same statements.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
  id TEXT NOT NULL, ts REAL NOT NULL, tenant TEXT NOT NULL, model TEXT NOT NULL, tier_asked TEXT NOT NULL,
  tier_served TEXT NOT NULL, status INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL, queue_s REAL NOT NULL, latency_s REAL NOT NULL, cost_units REAL NOT NULL,
  downgrade TEXT, PRIMARY KEY (ts, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS spend (tenant TEXT NOT NULL, period TEXT NOT NULL, units REAL NOT NULL,
  PRIMARY KEY (tenant, period));
CREATE TABLE IF NOT EXISTS budgets (tenant TEXT PRIMARY KEY, units REAL, period TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS switches (name TEXT PRIMARY KEY, on_ INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS learned_limits (replica TEXT PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (tenant TEXT NOT NULL, lease TEXT NOT NULL, expires REAL NOT NULL,
  PRIMARY KEY (tenant, lease));
CREATE TABLE IF NOT EXISTS minutes (tenant TEXT PRIMARY KEY, minute INTEGER NOT NULL, requests INTEGER NOT NULL,
  tokens INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS turbo_leases (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, granted_at REAL NOT NULL,
  term_ends_at REAL NOT NULL, last_heartbeat REAL NOT NULL, renewals INTEGER NOT NULL, forget_at REAL NOT NULL,
  version INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS turbo_leases_by_tenant ON turbo_leases (tenant);
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, owner TEXT NOT NULL, view BLOB NOT NULL,
  cancel INTEGER NOT NULL, forget_at REAL NOT NULL);
"""
_LEASE_COLUMNS = "id, tenant, granted_at, term_ends_at, last_heartbeat, renewals, forget_at, version"


class SqliteStore:
    def __init__(self, path: str | Path, busy_timeout_s: float = 5.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._db: sqlite3.Connection | None = None  # the thread's: waits for another process's lock
        self._fast: sqlite3.Connection | None = None  # the event loop's: never waits (busy → the thread)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="turbogate-sqlite")

    def _connect(self, timeout: float, schema: bool = True) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA synchronous=NORMAL")
            if schema:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"SQLite store {self.path}: {exc}") from exc
        return db

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._connect(self.busy_timeout_s)
        return self._db

    async def open(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._conn)
        # The thread's connection made the schema (waiting for a sibling worker doing the same);
        # the loop's, which never waits, would find the file locked by that sibling.
        self._fast = self._connect(0.0, schema=False)

    async def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        if self._fast is not None:
            self._fast.close()
            self._fast = None
        await asyncio.get_running_loop().run_in_executor(self._thread, shut)

    async def ping(self) -> None:
        await self._run(lambda db: db.execute("SELECT 1").fetchone())

    async def _run(self, fn: Callable[[sqlite3.Connection], T], write: bool = False) -> T:
        """A read runs at once on the event loop's connection, which never waits; a write, or a
        read of a locked file (another worker is writing), runs on the store's thread, which waits
        for the lock without stalling the event loop.  Writes stay off the loop although a thread
        hop doubles their CPU cost: a commit, and now and then a WAL checkpoint with its fsync,
        stalled every request in flight (Turbo's p95 TTFT at 2× overload went from 64 to 285 ms
        in benchmarks/turbo_isolation.py)."""
        if self._fast is not None and not write:
            try:
                return self._execute(self._fast, fn, write)
            except _Busy:
                pass
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._in_thread, fn, write)

    def _in_thread(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        try:
            return self._execute(self._conn(), fn, write)
        except _Busy as exc:
            raise StoreUnavailable(f"SQLite store {self.path}: locked for over {self.busy_timeout_s:g}s") from exc

    def _execute(self, db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T], write: bool) -> T:
        try:
            if not write:
                return fn(db)
            db.execute("BEGIN IMMEDIATE")
            try:
                out = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return out
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise _Busy from exc
            raise StoreUnavailable(f"SQLite store {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite store {self.path}: {exc}") from exc

    async def add_usage(self, records: Sequence[UsageRecord]) -> Spent:
        def row(r: UsageRecord) -> tuple[object, ...]:
            return (r.id, r.ts, r.tenant, r.model, r.tier_asked, r.tier_served, r.status, r.prompt_tokens,
                    r.completion_tokens, r.queue_s, r.latency_s, r.cost_units, r.downgrade)

        def go(db: sqlite3.Connection) -> Spent:
            out: Spent = {}
            # Records that spend no Turbo budget go in one executemany (most of them, and a row at
            # a time was most of the store's cost); a Turbo record's spend counts only if its row
            # is new (a replayed buffer may hold it already), so those go one by one.
            # They go in statements of up to _ROWS_PER_INSERT rows each: executemany steps once per
            # row, letting go of the GIL and taking it back each time, and on a busy event loop each
            # take-back waits for the loop (most of a record's cost on a 2-core machine).
            plain = [row(r) for r in records if r.turbo_units <= 0]
            for i in range(0, len(plain), _ROWS_PER_INSERT):
                chunk = plain[i:i + _ROWS_PER_INSERT]
                db.execute(_INSERT_USAGE + _MORE_ROWS * (len(chunk) - 1), [v for r in chunk for v in r])
            for r in records:
                if r.turbo_units <= 0:
                    continue
                cur = db.execute(_INSERT_USAGE, row(r))
                for key in spend_keys(r) if cur.rowcount == 1 else ():
                    out[(r.tenant, key)] = db.execute(
                        "INSERT INTO spend VALUES (?,?,?) ON CONFLICT (tenant, period) DO UPDATE SET "
                        "units = units + excluded.units RETURNING units", (r.tenant, key, r.turbo_units)).fetchone()[0]
            return out
        result: Spent = await self._run(go, write=True)
        return result

    async def usage(self, tenant: str | None, since: float, until: float) -> list[UsageRecord]:
        where = "ts >= ? AND ts < ?" + ("" if tenant is None else " AND tenant = ?")
        args: tuple[object, ...] = (since, until) if tenant is None else (since, until, tenant)
        rows = await self._run(lambda db: db.execute(
            "SELECT tenant, model, tier_asked, tier_served, status, prompt_tokens, completion_tokens, queue_s, "
            f"latency_s, cost_units, downgrade, ts, id FROM usage WHERE {where} ORDER BY ts, id", args).fetchall())
        return [UsageRecord(t, m, ta, tsv, st, pt, ct, q, lat, cu, dg, 0.0, ts, rid)
                for t, m, ta, tsv, st, pt, ct, q, lat, cu, dg, ts, rid in rows]

    async def spent(self, tenant: str, key: str) -> float:
        row = await self._run(lambda db: db.execute("SELECT units FROM spend WHERE tenant=? AND period=?",
                                              (tenant, key)).fetchone())
        return float(row[0]) if row else 0.0

    async def budgets(self) -> Budgets:
        rows = await self._run(lambda db: db.execute("SELECT tenant, units, period FROM budgets").fetchall())
        return {t: (u, p) for t, u, p in rows}

    async def set_budget(self, tenant: str, units: float | None, period: str) -> None:
        await self._run(lambda db: db.execute("INSERT OR REPLACE INTO budgets VALUES (?,?,?)", (tenant, units, period)),
                  write=True)

    async def switches(self) -> dict[str, bool]:
        rows = await self._run(lambda db: db.execute("SELECT name, on_ FROM switches").fetchall())
        return {name: bool(on) for name, on in rows}

    async def set_switch(self, name: str, on: bool) -> None:
        await self._run(lambda db: db.execute("INSERT OR REPLACE INTO switches VALUES (?,?)", (name, int(on))),
                        write=True)

    async def learned_limits(self) -> dict[str, str]:
        rows = await self._run(lambda db: db.execute("SELECT replica, state FROM learned_limits").fetchall())
        return {replica: state for replica, state in rows}

    async def put_learned_limits(self, limits: Mapping[str, str]) -> None:
        rows = list(limits.items())
        await self._run(lambda db: db.executemany("INSERT OR REPLACE INTO learned_limits VALUES (?,?)", rows),
                        write=True)

    async def acquire(self, tenant: str, limits: LimitPolicy, lease: str, ts: float,
                      lease_s: float) -> LimitRefusal | None:
        minute = minute_of(ts)

        def go(db: sqlite3.Connection) -> LimitRefusal | None:
            db.execute("DELETE FROM leases WHERE tenant=? AND expires<=?", (tenant, ts))
            in_flight = db.execute("SELECT COUNT(*) FROM leases WHERE tenant=?", (tenant,)).fetchone()[0]
            row = db.execute("SELECT minute, requests, tokens FROM minutes WHERE tenant=?", (tenant,)).fetchone()
            requests, tokens = (row[1], row[2]) if row and row[0] == minute else (0, 0)
            refusal = limit_refusal(limits, in_flight, requests, tokens, ts)
            if refusal is None:
                db.execute("INSERT OR REPLACE INTO leases VALUES (?,?,?)", (tenant, lease, ts + lease_s))
                db.execute("INSERT OR REPLACE INTO minutes VALUES (?,?,?,?)", (tenant, minute, requests + 1, tokens))
            return refusal
        refusal: LimitRefusal | None = await self._run(go, write=True)
        return refusal

    async def release(self, tenant: str, lease: str, tokens: int, ts: float) -> None:
        minute = minute_of(ts)

        def go(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM leases WHERE tenant=? AND lease=?", (tenant, lease))
            row = db.execute("SELECT minute, requests, tokens FROM minutes WHERE tenant=?", (tenant,)).fetchone()
            requests, used = (row[1], row[2]) if row and row[0] == minute else (0, 0)
            db.execute("INSERT OR REPLACE INTO minutes VALUES (?,?,?,?)", (tenant, minute, requests, used + tokens))
        await self._run(go, write=True)

    async def turbo_lease(self, lease_id: str) -> LeaseRecord | None:
        row = await self._run(lambda db: db.execute(f"SELECT {_LEASE_COLUMNS} FROM turbo_leases WHERE id=?",
                                                    (lease_id,)).fetchone())
        return None if row is None else LeaseRecord(*row)

    async def turbo_leases(self, tenant: str, ts: float) -> list[LeaseRecord]:
        rows = await self._run(lambda db: db.execute(
            f"SELECT {_LEASE_COLUMNS} FROM turbo_leases WHERE tenant=? AND forget_at>?", (tenant, ts)).fetchall())
        return [LeaseRecord(*row) for row in rows]

    async def put_turbo_lease(self, rec: LeaseRecord, expect_version: int | None, ts: float) -> bool:
        row = (rec.id, rec.tenant, rec.granted_at, rec.term_ends_at, rec.last_heartbeat, rec.renewals, rec.forget_at,
               (expect_version or 0) + 1)

        def go(db: sqlite3.Connection) -> bool:
            db.execute("DELETE FROM turbo_leases WHERE forget_at<=?", (ts,))
            if expect_version is None:
                return db.execute("INSERT OR IGNORE INTO turbo_leases VALUES (?,?,?,?,?,?,?,?)", row).rowcount == 1
            return db.execute("UPDATE turbo_leases SET tenant=?, granted_at=?, term_ends_at=?, last_heartbeat=?, "
                              "renewals=?, forget_at=?, version=? WHERE id=? AND version=?",
                              (*row[1:], rec.id, expect_version)).rowcount == 1
        done: bool = await self._run(go, write=True)
        return done

    async def job(self, job_id: str) -> JobRecord | None:
        row = await self._run(lambda db: db.execute("SELECT id, tenant, owner, view, cancel FROM jobs WHERE id=?",
                                                    (job_id,)).fetchone())
        return None if row is None else JobRecord(row[0], row[1], row[2], bytes(row[3]), bool(row[4]))

    async def put_job(self, rec: JobRecord, forget_at: float, ts: float) -> None:
        def go(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM jobs WHERE forget_at<=?", (ts,))
            db.execute("INSERT INTO jobs VALUES (?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET view=excluded.view, "
                       "forget_at=excluded.forget_at, cancel=max(cancel, excluded.cancel)",
                       (rec.id, rec.tenant, rec.owner, rec.view, int(rec.cancel_requested), forget_at))
        await self._run(go, write=True)

    async def request_job_cancel(self, job_id: str) -> bool:
        found: bool = await self._run(lambda db: db.execute("UPDATE jobs SET cancel=1 WHERE id=?",
                                                            (job_id,)).rowcount == 1, write=True)
        return found

    async def job_cancels(self, job_ids: Sequence[str]) -> set[str]:
        if not job_ids:
            return set()
        ids = list(job_ids)
        rows = await self._run(lambda db: db.execute(
            f"SELECT id FROM jobs WHERE cancel=1 AND id IN ({','.join('?' * len(ids))})", ids).fetchall())
        return {r[0] for r in rows}
