"""One process's store: tests, ``create_app`` without a config file, and the local limits a
gateway falls back on while its shared store is unreachable."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from turbogate.sched.metering import LimitPolicy, LimitRefusal, UsageRecord, limit_refusal, minute_of, spend_keys
from turbogate.store.base import Budgets, JobRecord, LeaseRecord, Spent


class MemoryStore:
    def __init__(self) -> None:
        self.records: dict[str, UsageRecord] = {}
        self._spend: dict[tuple[str, str], float] = {}
        self._budgets: Budgets = {}
        self._switches: dict[str, bool] = {}
        self._learned: dict[str, str] = {}
        self._leases: dict[str, dict[str, float]] = {}  # tenant → lease → expiry (wall seconds)
        self._minute: dict[str, tuple[int, int, int]] = {}  # tenant → (minute, requests, tokens)
        self._turbo_leases: dict[str, LeaseRecord] = {}
        self._jobs: dict[str, tuple[JobRecord, float]] = {}  # id → (record, forget_at)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def add_usage(self, records: Sequence[UsageRecord]) -> Spent:
        out: Spent = {}
        for rec in records:
            if rec.id in self.records:
                continue
            self.records[rec.id] = rec
            for key in spend_keys(rec):
                total = self._spend.get((rec.tenant, key), 0.0) + rec.turbo_units
                self._spend[(rec.tenant, key)] = out[(rec.tenant, key)] = total
        return out

    async def usage(self, tenant: str | None, since: float, until: float) -> list[UsageRecord]:
        return sorted((r for r in self.records.values() if (tenant is None or r.tenant == tenant)
                       and since <= r.ts < until), key=lambda r: (r.ts, r.id))

    async def spent(self, tenant: str, key: str) -> float:
        return self._spend.get((tenant, key), 0.0)

    async def budgets(self) -> Budgets:
        return dict(self._budgets)

    async def set_budget(self, tenant: str, units: float | None, period: str) -> None:
        self._budgets[tenant] = (units, period)

    async def switches(self) -> dict[str, bool]:
        return dict(self._switches)

    async def learned_limits(self) -> dict[str, str]:
        return dict(self._learned)

    async def put_learned_limits(self, limits: Mapping[str, str]) -> None:
        self._learned.update(limits)

    async def set_switch(self, name: str, on: bool) -> None:
        self._switches[name] = on

    async def acquire(self, tenant: str, limits: LimitPolicy, lease: str, ts: float,
                      lease_s: float) -> LimitRefusal | None:
        leases = self._leases.setdefault(tenant, {})
        for k in [k for k, exp in leases.items() if exp <= ts]:
            del leases[k]
        minute = minute_of(ts)
        m, requests, tokens = self._minute.get(tenant, (minute, 0, 0))
        if m != minute:
            requests, tokens = 0, 0
        refusal = limit_refusal(limits, len(leases), requests, tokens, ts)
        if refusal is None:
            leases[lease] = ts + lease_s
            self._minute[tenant] = (minute, requests + 1, tokens)
        return refusal

    async def release(self, tenant: str, lease: str, tokens: int, ts: float) -> None:
        self._leases.get(tenant, {}).pop(lease, None)
        minute = minute_of(ts)
        m, requests, used = self._minute.get(tenant, (minute, 0, 0))
        if m != minute:
            requests, used = 0, 0
        self._minute[tenant] = (minute, requests, used + tokens)

    async def turbo_lease(self, lease_id: str) -> LeaseRecord | None:
        return self._turbo_leases.get(lease_id)

    async def turbo_leases(self, tenant: str, ts: float) -> list[LeaseRecord]:
        return [r for r in self._turbo_leases.values() if r.tenant == tenant and r.forget_at > ts]

    async def put_turbo_lease(self, rec: LeaseRecord, expect_version: int | None, ts: float) -> bool:
        for k in [k for k, r in self._turbo_leases.items() if r.forget_at <= ts]:
            del self._turbo_leases[k]
        cur = self._turbo_leases.get(rec.id)
        if (cur.version if cur is not None else None) != expect_version:
            return False
        self._turbo_leases[rec.id] = dataclasses.replace(rec, version=(expect_version or 0) + 1)
        return True

    async def job(self, job_id: str) -> JobRecord | None:
        got = self._jobs.get(job_id)
        return None if got is None else got[0]

    async def put_job(self, rec: JobRecord, forget_at: float, ts: float) -> None:
        for k in [k for k, (_, f) in self._jobs.items() if f <= ts]:
            del self._jobs[k]
        cur = self._jobs.get(rec.id)
        cancel = rec.cancel_requested or (cur is not None and cur[0].cancel_requested)
        self._jobs[rec.id] = (dataclasses.replace(rec, cancel_requested=cancel), forget_at)

    async def request_job_cancel(self, job_id: str) -> bool:
        cur = self._jobs.get(job_id)
        if cur is None:
            return False
        self._jobs[job_id] = (dataclasses.replace(cur[0], cancel_requested=True), cur[1])
        return True

    async def job_cancels(self, job_ids: Sequence[str]) -> set[str]:
        return {i for i in job_ids if (cur := self._jobs.get(i)) is not None and cur[0].cancel_requested}
