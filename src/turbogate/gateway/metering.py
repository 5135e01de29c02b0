"""The gateway's side of metering (docs/metering.md): it stamps the flow's usage records with
wall time and a unique id and stores them before the response's final byte, takes and gives
back each tenant's global limit place, and keeps the flow's switches and budgets in step with
the store shared by every gateway process.  The rules themselves are sched/metering.py's."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from turbogate.asgi import Message, Send
from turbogate.errors import ConfigError
from turbogate.sched import FlowRequest
from turbogate.sched.metering import LimitPolicy, LimitRefusal, UsageRecord
from turbogate.sched.switches import LocalWrites, SetTier, budget_changes, switch_changes
from turbogate.store.base import Spent, Store, StoreUnavailable
from turbogate.store.journal import UsageJournal
from turbogate.store.memory import MemoryStore
from turbogate.store.resilient import ResilientStore
from turbogate.store.writer import UsageWriter

if TYPE_CHECKING:
    from turbogate.config import GatewayConfig
    from turbogate.sched import Flow

_Read = TypeVar("_Read")

log = logging.getLogger("turbogate.gateway")


def _beside_config(suffix: str) -> Path | None:
    """``<config file><suffix>`` when the config's folder is writable, else the same name in the
    temp folder (a read-only config mount, as in deploy/k8s); None without a config file."""
    path = os.environ.get("TURBOGATE_CONFIG")
    if not path:
        return None
    config = Path(path)
    if os.access(config.parent, os.W_OK):
        return Path(path + suffix)
    return Path(tempfile.gettempdir()) / "turbogate" / (config.name + suffix)


def make_store(config: GatewayConfig) -> tuple[Store, Path, str]:
    """The configured store, where its usage buffer lives, and its name for logs."""
    sc = config.store
    kind = sc.kind if sc is not None else ("sqlite" if _beside_config("") is not None else "memory")
    buffer_dir = Path(sc.buffer_dir) if sc is not None and sc.buffer_dir else (
        _beside_config(".usage-buffer") or Path(os.environ.get("TMPDIR", "/tmp")) / f"turbogate-{os.getpid()}")
    timeout = sc.timeout_s if sc is not None else 1.0
    if kind == "sqlite":
        from turbogate.store.sqlite import SqliteStore

        path = Path(sc.path) if sc is not None and sc.path else _beside_config(".state.sqlite3")
        if path is None:
            raise ConfigError("store.path: a SQLite store needs a path when the gateway runs without a config file")
        return SqliteStore(path, busy_timeout_s=max(timeout, 5.0)), buffer_dir, f"SQLite store {path}"
    if kind == "redis":
        from turbogate.store.redis_store import RedisStore

        assert sc is not None
        return RedisStore(sc.url, sc.prefix, timeout), buffer_dir, f"Redis store {sc.url}"
    return MemoryStore(), buffer_dir, "memory store"


class Metering:
    """The store's side of ``flow``'s usage, limits, switches and budgets.  ``limits``: each
    tenant's global limits; ``hold_s``: the longest a limit place is held (configpolicy.py)."""

    def __init__(self, cfg: GatewayConfig, flow: Flow, limits: dict[str, LimitPolicy], hold_s: float) -> None:
        self.flow = flow
        primary, buffer_dir, name = make_store(cfg)
        sc = cfg.store
        self.sync_interval_s = sc.sync_interval_s if sc is not None else 0.5
        retry = sc.retry_interval_s if sc is not None else 1.0
        self.store = ResilientStore(primary, buffer_dir, retry, sc.timeout_s if sc is not None else 1.0, name)
        log.info("usage, budgets, switches and tenant limits: %s (buffer while unreachable: %s)", name, buffer_dir)
        # Records are journaled on local disk and reach the store in batches (store/writer.py);
        # a memory store has nothing to make durable.
        journal = None if isinstance(primary, MemoryStore) else UsageJournal(buffer_dir)
        self.writer = UsageWriter(self.store, self._on_spent, journal)
        self.instance = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.limits = limits
        #: the longest a request can live: a crashed gateway's limit place is freed after it
        self.lease_s = hold_s
        self.strip: set[int] = set()  # streams whose usage chunk the gateway asked for (the client did not)
        self._leases: dict[int, tuple[str, str]] = {}
        self._written: set[int] = set()
        self._wall = time.time() - time.perf_counter()
        self._seq = 0
        self._task: asyncio.Task[None] | None = None
        #: called after each sync with the store (the jobs API: cancels asked on other workers)
        self.sync_hooks: list[Callable[[], Awaitable[None]]] = []
        self.local_writes = LocalWrites()  # so that a sync does not undo a switch or budget set during its read

    # ---- records ---------------------------------------------------------------------------
    def record_id(self, req: FlowRequest) -> str:
        """The id of ``req``'s usage record, known from the start (the X-Turbogate-Request-Id
        header), so a client's log can be checked against the store."""
        return f"{self.instance}-{req.id}"

    def _stamp(self, rec: UsageRecord, rid: str) -> UsageRecord:
        rec.ts, rec.id = rec.at + self._wall, rid
        return rec

    def _submit(self, req: FlowRequest) -> asyncio.Future[None] | None:
        rec = req.usage
        if rec is None or req.id in self._written:
            return None
        self._written.add(req.id)
        return self.writer.submit(self._stamp(rec, self.record_id(req)), self.flow.budgets.spends_budget(rec))

    async def record(self, req: FlowRequest) -> None:
        """Make ``req``'s record durable now (called before the response's final byte): in the
        journal at once, or — where the journal cannot be written — in the store."""
        fut = self._submit(req)
        if fut is not None:
            await self.stored(req, fut)

    def durable(self, req: FlowRequest) -> asyncio.Future[None] | None:
        """``record`` without a coroutine for the usual record, durable at once: None then, else
        the future to pass to ``stored``."""
        return self._submit(req)

    async def stored(self, req: FlowRequest, fut: asyncio.Future[None]) -> None:
        """Wait for the store to hold ``req``'s record (from ``durable``)."""
        try:
            await fut
        except Exception:  # a store bug must not cost the client its answer: logged, counted
            self.store.lost += 1
            log.exception("usage record %s not stored", self.record_id(req))

    def follower_send(self, send: Send, req: FlowRequest, leader: FlowRequest) -> Send:
        """A coalesced follower's ``send``: its own record id in the headers, and its own record
        (the shared call's tokens) stored before its final byte."""
        status = 0
        own_id = self.record_id(req).encode()

        async def wrapped(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [(k, own_id if k == b"x-turbogate-request-id" else v)
                                                  for k, v in message.get("headers", [])]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                self.flow.settle(req, status, time.perf_counter(), leader)
                await self.record(req)
            await send(message)
        return wrapped

    def record_edge(self, tenant: str, status: int, model: str, tier: str, now: float) -> None:
        """A request refused at the edge, before the flow took it (bad body, unknown model)."""
        self._seq += 1
        rec = self._stamp(UsageRecord(tenant, model, tier, tier, status, 0, 0, 0.0, 0.0, 0.0, None, now),
                          f"{self.instance}-edge-{self._seq}")
        fut = self.writer.submit(rec)
        if fut is not None:
            fut.add_done_callback(_quiet)

    def done(self, req: FlowRequest) -> None:
        """The request is over: store its record if not yet done, give back its limit place."""
        fut = self._submit(req)
        if fut is not None:
            fut.add_done_callback(_quiet)
        self._written.discard(req.id)
        self.strip.discard(req.id)
        lease = self._leases.pop(req.id, None)
        if lease is not None:
            tokens = req.prompt_tokens + req.completion_tokens
            task = asyncio.get_running_loop().create_task(self.store.release(lease[0], lease[1], tokens, time.time()))
            task.add_done_callback(_quiet)

    def ask_stream_usage(self, body: dict[str, object], req: FlowRequest) -> bool:
        """Ask the engine for a stream's usage chunk (the tokens to meter); True when ``body``
        changed.  A client that did not ask for the chunk does not get it."""
        if not req.stream:
            return False
        opts = body.get("stream_options")
        if isinstance(opts, dict) and opts.get("include_usage") is True:
            return False
        if opts is not None and not isinstance(opts, dict):
            return False  # not ours to fix: the engine answers the client's mistake
        body["stream_options"] = {**(opts or {}), "include_usage": True}
        self.strip.add(req.id)
        return True

    def key_body(self, body: dict[str, object], req: FlowRequest) -> dict[str, object]:
        """The body a coalescing key is made from: a stream whose usage chunk the gateway asked for
        (and strips) must not share a call with one whose client asked for it."""
        return {**body, "_turbogate_strip_usage": True} if req.id in self.strip else body

    async def share_switch(self, name: str, on: bool) -> None:
        """Write an admin switch (its name: sched/switches.py) to the store, where every gateway
        process reads it."""
        with self.local_writes.writing(name), contextlib.suppress(StoreUnavailable):
            await self.store.set_switch(name, on)  # down: this process has it; the others keep theirs

    # ---- limits ----------------------------------------------------------------------------
    async def admit(self, req: FlowRequest) -> LimitRefusal | None:
        limits = self.limits.get(req.tenant)
        if limits is None:
            return None
        lease = f"{self.instance}:{req.id}"
        refusal = await self.store.acquire(req.tenant, limits, lease, time.time(), self.lease_s)
        if refusal is None:
            self._leases[req.id] = (req.tenant, lease)
        return refusal

    # ---- switches and budgets shared through the store ---------------------------------------
    def _on_spent(self, spent: Spent) -> None:
        self.flow.budgets.observe_spent(spent, time.time())

    async def sync(self) -> None:
        """Read switches, budgets and spend back from the store (other processes' changes)."""
        store, flow = self.store, self.flow
        stored, newer_here = await self._read(store.switches)
        for change in switch_changes(stored, flow.enabled, flow.tenants, newer_here):
            if isinstance(change, SetTier):
                flow.set_tier(change.tier, change.on)
            else:
                flow.set_tenant_turbo(change.tenant, change.on)
        book = flow.budgets
        budgets, newer_here = await self._read(store.budgets)
        for tenant, units, period in budget_changes(budgets, flow.tenants, newer_here):
            book.set_budget(tenant, units, period)
        now = time.time()
        for tenant in list(book.budgets):
            key = book.start_period(tenant, now)
            if key is not None:
                book.observe(tenant, key, await store.spent(tenant, key))
        for hook in self.sync_hooks:
            await hook()

    async def _read(self, read: Callable[[], Awaitable[_Read]]) -> tuple[_Read, frozenset[str]]:
        """What ``read`` returns from the store, and what this process set while it read (newer here)."""
        mark = self.local_writes.read_began()
        value = await read()
        return value, self.local_writes.newer(mark)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.sync_interval_s if not self.store.degraded else self.store.retry_interval_s)
            if self.store.degraded and not await self.store.recover():
                continue
            with contextlib.suppress(StoreUnavailable):
                await self.sync()

    async def start(self) -> None:
        await self.store.open()
        with contextlib.suppress(StoreUnavailable):
            await self.sync()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.close(), 5.0)
        await self.store.close()

    def describe(self) -> dict[str, object]:
        return {"store": self.store.name, "degraded": self.store.degraded, "buffered": self.store.buffered,
                "replayed": self.store.replayed, "lost": self.store.lost}


def _quiet(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("usage record not stored: %s", fut.exception())
