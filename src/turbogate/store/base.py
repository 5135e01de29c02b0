"""The Store protocol, record (de)serialisation and the usage summary every store shares."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from turbogate.errors import TurbogateError
from turbogate.sched.metering import LimitPolicy, LimitRefusal, UsageRecord


class StoreUnavailable(TurbogateError):
    """The store cannot be reached (the gateway then degrades: docs/metering.md)."""


#: Budgets as the store keeps them: tenant → (units or None, period).
Budgets = dict[str, tuple[float | None, str]]
#: Spend as add_usage reports it: (tenant, period key) → units.
Spent = dict[tuple[str, str], float]


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A Turbo lease as the store keeps it: its times (wall seconds), never its state, which
    sched/leases.py derives from them.  ``version`` counts writes (compare-and-set)."""

    id: str
    tenant: str
    granted_at: float
    term_ends_at: float
    last_heartbeat: float
    renewals: int
    forget_at: float  # the store may drop the record after this (wall seconds)
    version: int = 0

    def to_json(self) -> bytes:
        return orjson.dumps([self.tenant, self.granted_at, self.term_ends_at, self.last_heartbeat, self.renewals,
                             self.forget_at])

    @classmethod
    def from_json(cls, lease_id: str, raw: bytes | str, version: int) -> LeaseRecord:
        tenant, granted, ends, hb, renewals, forget = orjson.loads(raw)
        return cls(lease_id, tenant, granted, ends, hb, renewals, forget, version)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """An L4 job as the store keeps it: the view its worker last wrote (JSON: status, steps and
    their outputs), which worker runs it, and whether a cancel was asked for elsewhere."""

    id: str
    tenant: str
    owner: str
    view: bytes
    cancel_requested: bool = False


class Store(Protocol):
    """Every call is atomic across the processes sharing the store."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> None: ...

    async def add_usage(self, records: Sequence[UsageRecord]) -> Spent:
        """Store ``records`` (a record already stored, by id, is skipped: replays are safe) and add
        each Turbo record's units to its tenant's spend in each period (``spend_keys``).
        Returns the spend afterwards of each (tenant, period key) touched."""
        ...

    async def usage(self, tenant: str | None, since: float, until: float) -> list[UsageRecord]: ...
    async def spent(self, tenant: str, key: str) -> float: ...
    async def budgets(self) -> Budgets: ...
    async def set_budget(self, tenant: str, units: float | None, period: str) -> None: ...
    async def switches(self) -> dict[str, bool]: ...
    async def set_switch(self, name: str, on: bool) -> None: ...

    # ---- learned per-replica concurrency limits (their text: sched/learned.py) ----
    async def learned_limits(self) -> dict[str, str]: ...
    async def put_learned_limits(self, limits: Mapping[str, str]) -> None:
        """Replace the stored text of each replica named in ``limits`` (others stay)."""
        ...

    async def acquire(self, tenant: str, limits: LimitPolicy, lease: str, ts: float,
                      lease_s: float) -> LimitRefusal | None:
        """Take one in-flight place and count one request this minute, unless a limit refuses
        (then nothing is counted).  ``lease_s``: a place not released (a crashed gateway) is
        freed after this long."""
        ...

    async def release(self, tenant: str, lease: str, tokens: int, ts: float) -> None:
        """Give the place back and add the request's tokens to this minute's count."""
        ...

    # ---- Turbo leases (times only; the rules are sched/leases.py's) ----
    async def turbo_lease(self, lease_id: str) -> LeaseRecord | None: ...

    async def turbo_leases(self, tenant: str, ts: float) -> list[LeaseRecord]:
        """``tenant``'s leases not yet past their ``forget_at``."""
        ...

    async def put_turbo_lease(self, rec: LeaseRecord, expect_version: int | None, ts: float) -> bool:
        """Write ``rec`` as version ``expect_version + 1`` if the stored one is ``expect_version``
        (``None``: only if there is none).  False, and nothing written, otherwise.  Records past
        their ``forget_at`` at ``ts`` may be dropped."""
        ...

    # ---- L4 jobs (the view its worker writes; a cancel asked on another) ----
    async def job(self, job_id: str) -> JobRecord | None: ...

    async def put_job(self, rec: JobRecord, forget_at: float, ts: float) -> None:
        """Write the job's view (a cancel already asked for stays asked); jobs past their
        ``forget_at`` at ``ts`` may be dropped."""
        ...

    async def request_job_cancel(self, job_id: str) -> bool:
        """Mark the job to be cancelled by the worker running it; False if there is no such job."""
        ...

    async def job_cancels(self, job_ids: Sequence[str]) -> set[str]:
        """Which of ``job_ids`` have a cancel asked for."""
        ...


COLUMNS = ("ts", "id", "tenant", "model", "tier_asked", "tier_served", "status", "prompt_tokens",
           "completion_tokens", "queue_s", "latency_s", "cost_units", "downgrade")
SUMMARY_COLUMNS = ("tenant", "day", "tier", "requests", "errors", "prompt_tokens", "completion_tokens", "cost_units")


def summarize(records: Iterable[UsageRecord], by_day: bool = True, by_tier: bool = True,
              by_tenant: bool = True) -> list[dict[str, Any]]:
    """Totals per (tenant, UTC day, tier served), in key order; a dimension not grouped on reads '*'."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        key = (r.tenant if by_tenant else "*", time.strftime("%Y-%m-%d", time.gmtime(r.ts)) if by_day else "*",
               r.tier_served if by_tier else "*")
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"tenant": key[0], "day": key[1], "tier": key[2], "requests": 0, "errors": 0,
                               "prompt_tokens": 0, "completion_tokens": 0, "cost_units": 0.0}
        g["requests"] += 1
        g["errors"] += r.status >= 400
        g["prompt_tokens"] += r.prompt_tokens
        g["completion_tokens"] += r.completion_tokens
        g["cost_units"] += r.cost_units
    return [groups[k] for k in sorted(groups)]
