"""Shared state behind one protocol (docs/metering.md): usage records, Turbo budgets and spend,
the Turbo switches, global per-tenant limits, Turbo leases (their times) and L4 jobs (their
views and cancel requests).

``MemoryStore`` (one process; tests), ``SqliteStore`` (WAL; one host, shared by ``--workers``),
``RedisStore`` (several hosts; limits atomic in Lua).  ``ResilientStore`` wraps any of them:
with the store unreachable the gateway keeps serving within local limits, buffers usage on
local disk and replays it when the store returns.
"""

from turbogate.store.base import Store, StoreUnavailable, summarize
from turbogate.store.memory import MemoryStore

__all__ = ["MemoryStore", "Store", "StoreUnavailable", "summarize"]
