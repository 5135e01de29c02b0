"""Metering, Turbo budgets and per-tenant limits as pure rules (no clock, no I/O).

* ``usage_of(req, ...)``: the one usage record of a closed request (served, shed or failed),
  built by the flow when it closes the request, so the gateway and the simulator meter alike.
* ``cost_units``: tokens × the served tier's cost multiple (Turbo spends GPU time faster, so
  it costs ``turbo_cost_multiple`` × Standard).
* ``BudgetBook``: each tenant's Turbo budget for the current period and what it has spent;
  ``Flow.resolve`` serves a spent tenant's Turbo request as Standard, saying why.
* ``period_start`` / ``period_key``: when a budget period began (budgets reset on schedule).
* ``LimitPolicy`` / ``limit_refusal``: global per-tenant limits (in flight, requests and tokens
  per minute), the rule that every store applies atomically (Redis in a Lua script).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from turbogate.sched.tiers import Tier

Period = Literal["hour", "day", "week", "month"]
PERIODS: tuple[str, ...] = ("hour", "day", "week", "month")

#: Why a request asking Turbo was served Standard because its tenant's budget is spent.
BUDGET_SPENT = "turbo_budget_spent"


@dataclass(frozen=True, slots=True)
class MeteringPolicy:
    turbo_cost_multiple: float = 2.0  # a Turbo token costs this many Standard tokens
    relax_cost_multiple: float = 1.0


@dataclass(slots=True)
class UsageRecord:
    """One request's usage.  ``at`` is the flow's clock at close; the gateway stamps ``ts``
    (wall seconds) and ``id`` (unique across processes) in place before storing it (not frozen:
    a copy per request was a measurable share of the metering cost)."""

    tenant: str
    model: str
    tier_asked: str
    tier_served: str
    status: int
    prompt_tokens: int
    completion_tokens: int
    queue_s: float
    latency_s: float
    cost_units: float
    downgrade: str | None = None
    at: float = 0.0
    ts: float = 0.0
    id: str = ""

    # Written out, not generated: a compiled build runs a generated dataclass __init__ as interpreted Python.
    def __init__(self, tenant: str, model: str, tier_asked: str, tier_served: str, status: int, prompt_tokens: int,
                 completion_tokens: int, queue_s: float, latency_s: float, cost_units: float,
                 downgrade: str | None = None, at: float = 0.0, ts: float = 0.0, id: str = "") -> None:
        self.tenant, self.model, self.tier_asked, self.tier_served = tenant, model, tier_asked, tier_served
        self.status, self.prompt_tokens, self.completion_tokens = status, prompt_tokens, completion_tokens
        self.queue_s, self.latency_s, self.cost_units = queue_s, latency_s, cost_units
        self.downgrade, self.at, self.ts, self.id = downgrade, at, ts, id

    @property
    def turbo_units(self) -> float:
        """What this record charges against the tenant's Turbo budget."""
        return self.cost_units if self.tier_served == _TURBO_NAME else 0.0


_TURBO, _RELAX = Tier.TURBO, Tier.RELAX  # read per request: module names, not class attributes
_TURBO_NAME = Tier.TURBO.value  # (an enum's .value is a Python-level descriptor: three calls a read)


def cost_units(served: Tier, prompt_tokens: int, completion_tokens: int, policy: MeteringPolicy) -> float:
    tokens = float(prompt_tokens + completion_tokens)
    if served is _TURBO:
        return tokens * policy.turbo_cost_multiple
    if served is _RELAX:
        return tokens * policy.relax_cost_multiple
    return tokens


def period_start(ts: float, period: str) -> float:
    """Wall time (UTC seconds) at which the budget period holding ``ts`` began."""
    t = time.gmtime(ts)
    if period == "hour":
        return float(calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, 0, 0)))
    day = float(calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0)))
    if period == "day":
        return day
    if period == "week":  # weeks start on Monday (tm_wday 0)
        return day - t.tm_wday * 86400.0
    if period == "month":
        return float(calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)))
    raise ValueError(f"unknown budget period {period!r}; use one of {', '.join(PERIODS)}")


def period_key(ts: float, period: str) -> str:
    """A stable name for the period holding ``ts`` (``day:2026-11-30``): the store keys spend by it,
    so a new period starts from zero without any reset job."""
    start = time.gmtime(period_start(ts, period))
    fmt = "%Y-%m-%dT%H" if period == "hour" else "%Y-%m" if period == "month" else "%Y-%m-%d"
    return f"{period}:{time.strftime(fmt, start)}"


def spend_keys(rec: UsageRecord) -> tuple[str, ...]:
    """The periods a Turbo record's units count in: every period kind, so a budget set (or its
    period changed) mid-period still sees what was spent before."""
    if rec.turbo_units <= 0:
        return ()
    return tuple(period_key(rec.ts, p) for p in PERIODS)


@dataclass(slots=True)
class TenantBudget:
    units: float | None  # Turbo cost units per period; None: no budget (unlimited)
    period: str = "month"
    key: str = ""  # the period the spend below belongs to
    spent: float = 0.0


@dataclass(slots=True)
class BudgetBook:
    """Turbo budgets and spend.  The flow charges its own closes at once (``charge``); the
    gateway overwrites each tenant's spend with the store's total for all processes
    (``observe``) and moves to a new period (``roll``) when the wall clock says so."""

    budgets: dict[str, TenantBudget] = field(default_factory=dict)

    def set_budget(self, tenant: str, units: float | None, period: str) -> None:
        period_start(0.0, period)  # validates the name
        b = self.budgets.get(tenant)
        if b is None or b.period != period:
            self.budgets[tenant] = TenantBudget(units, period)
        else:
            b.units = units

    def roll(self, tenant: str, key: str) -> None:
        b = self.budgets.get(tenant)
        if b is not None and b.key != key:
            b.key, b.spent = key, 0.0

    def start_period(self, tenant: str, now: float) -> str | None:
        """Move ``tenant``'s budget to the period holding wall time ``now`` (a new period starts
        from zero spent); that period's key, whose spend the store holds (None: no budget)."""
        b = self.budgets.get(tenant)
        if b is None:
            return None
        key = period_key(now, b.period)
        self.roll(tenant, key)
        return key

    def observe_spent(self, spent: Mapping[tuple[str, str], float], now: float) -> None:
        """Totals from the store, by (tenant, period key): each counts only for a tenant with a
        budget and only for the period holding wall time ``now`` in that budget's kind (a total
        of a past period, or of another period kind, changes nothing)."""
        for (tenant, key), units in spent.items():
            b = self.budgets.get(tenant)
            if b is not None and key == period_key(now, b.period):
                self.observe(tenant, key, units)

    def observe(self, tenant: str, key: str, spent: float) -> None:
        b = self.budgets.get(tenant)
        if b is not None:
            if b.key != key:
                b.key, b.spent = key, spent
            else:
                b.spent = spent

    def charge(self, tenant: str, units: float) -> None:
        b = self.budgets.get(tenant)
        if b is not None and units > 0:
            b.spent += units

    def spends_budget(self, rec: UsageRecord) -> bool:
        """Whether ``rec`` charges a Turbo budget its tenant has (not an unlimited one).  Such a
        record must reach the store before its answer ends: the store's running total is how
        every process learns the spend.  Any other record may wait for the next batch."""
        if rec.turbo_units <= 0:
            return False
        b = self.budgets.get(rec.tenant)
        return b is not None and b.units is not None

    def exhausted(self, tenant: str) -> bool:
        b = self.budgets.get(tenant)
        return b is not None and b.units is not None and b.spent >= b.units

    def describe(self, tenant: str) -> dict[str, object]:
        b = self.budgets.get(tenant)
        if b is None:
            return {"turbo_budget_units": None}
        return {"turbo_budget_units": b.units, "period": b.period, "period_key": b.key, "spent_units": b.spent,
                "exhausted": self.exhausted(tenant)}


@dataclass(frozen=True, slots=True)
class LimitPolicy:
    """A tenant's limits across every gateway process (None: no limit)."""

    max_in_flight: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @property
    def any(self) -> bool:
        return self.max_in_flight is not None or self.requests_per_minute is not None \
            or self.tokens_per_minute is not None


@dataclass(frozen=True, slots=True)
class LimitRefusal:
    code: str
    message: str
    retry_after_s: int


def minute_of(ts: float) -> int:
    """The fixed one-minute window holding wall time ``ts`` (limits count per window)."""
    return int(ts // 60)


def limit_refusal(limits: LimitPolicy, in_flight: int, requests_this_minute: int, tokens_this_minute: int,
                  ts: float) -> LimitRefusal | None:
    """Whether one more request may start, given the counts across all processes (the same rule
    the Redis Lua script applies; tests/sched checks the two agree)."""
    to_next_minute = max(1, int(60 - ts % 60) + 1)
    if limits.max_in_flight is not None and in_flight >= limits.max_in_flight:
        return LimitRefusal("tenant_limit", f"the tenant already has {in_flight} requests in flight "
                            f"across the gateways (limit {limits.max_in_flight})", 1)
    if limits.requests_per_minute is not None and requests_this_minute >= limits.requests_per_minute:
        return LimitRefusal("tenant_rate_limit", f"the tenant made {requests_this_minute} requests this minute "
                            f"(limit {limits.requests_per_minute} per minute)", to_next_minute)
    if limits.tokens_per_minute is not None and tokens_this_minute >= limits.tokens_per_minute:
        return LimitRefusal("tenant_token_limit", f"the tenant used {tokens_this_minute} tokens this minute "
                            f"(limit {limits.tokens_per_minute} per minute)", to_next_minute)
    return None
