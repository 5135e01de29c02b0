"""One process's store: tests, ``create_app`` without a config file, and the local limits a
gateway falls back on while its shared store is unreachable."""

from __future__ import annotations

from collections.abc import Sequence

from turbogate.sched.metering import LimitPolicy, LimitRefusal, UsageRecord, limit_refusal, minute_of, spend_keys
from turbogate.store.base import Budgets, Spent


class MemoryStore:
    def __init__(self) -> None:
        self.records: dict[str, UsageRecord] = {}
        self._spend: dict[tuple[str, str], float] = {}
        self._budgets: Budgets = {}
        self._switches: dict[str, bool] = {}
        self._leases: dict[str, dict[str, float]] = {}  # tenant → lease → expiry (wall seconds)
        self._minute: dict[str, tuple[int, int, int]] = {}  # tenant → (minute, requests, tokens)

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
