"""Usage and budget routes (docs/metering.md).

``GET /v1/usage`` (the calling tenant's key) and ``GET /admin/usage`` (admin token, every tenant,
or ``tenant=NAME``) take ``start`` and ``end`` (unix seconds or ``YYYY-MM-DD``, UTC; default: the
last 30 days), ``group_by`` (comma list of ``day``, ``tier``, ``tenant``; ``records`` for one row
per request; default ``day,tier``, and ``tenant,day,tier`` for the admin) and ``format``
(``json`` or ``csv``; ``Accept: text/csv`` works too).

``GET /admin/budgets`` lists each tenant's Turbo budget and what it has spent this period;
``POST /admin/budgets/{tenant}`` ``{"turbo_budget_units": float | null, "period": "month"}`` sets
one, for every gateway process sharing the store.
"""

from __future__ import annotations

import calendar
import csv
import io
import time
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field

from turbogate.asgi import Receive, Scope, Send, header, send_bytes, send_error, send_json
from turbogate.errors import TurbogateError
from turbogate.gateway.admin import body_limit, read_model
from turbogate.gateway.conformance import method_not_allowed
from turbogate.sched.metering import period_key
from turbogate.sched.switches import budget_write
from turbogate.store.base import COLUMNS, SUMMARY_COLUMNS, StoreUnavailable, summarize

if TYPE_CHECKING:
    from turbogate.gateway.metering import Metering
    from turbogate.gateway.parts import Auth, Shed
    from turbogate.sched import Flow

ROUTES = frozenset({"/v1/usage", "/admin/usage", "/admin/budgets"})
_GROUPS = ("day", "tier", "tenant", "records")
_CSV = b"text/csv; charset=utf-8"


class BudgetSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turbo_budget_units: float | None = Field(ge=0)
    period: Literal["hour", "day", "week", "month"] = "month"


def handles(path: str) -> bool:
    return path in ROUTES or path.startswith("/admin/budgets/")


class BadParam(TurbogateError, ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def _when(value: str, param: str) -> float:
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return float(calendar.timegm(time.strptime(value, "%Y-%m-%d")))
    except ValueError:
        raise BadParam(param, f"{param} must be unix seconds or a YYYY-MM-DD date, got {value!r}") from None


def _query(scope: Scope) -> dict[str, str]:
    raw: bytes = scope.get("query_string", b"")
    return {k: v[-1] for k, v in parse_qs(raw.decode("latin-1")).items()}


class UsageApi:
    """``/v1/usage``, ``/admin/usage`` and ``/admin/budgets``: records and budgets in ``meter``'s
    store, budgets applied to ``flow``."""

    def __init__(self, auth: Auth, flow: Flow, meter: Metering, shed: Shed, max_body: int) -> None:
        self.auth = auth
        self.flow = flow
        self.meter = meter
        self.shed = shed
        self.admin_max_body = body_limit(max_body)

    async def _report(self, scope: Scope, send: Send, tenant: str | None) -> None:
        q = _query(scope)
        try:
            now = time.time()
            end = _when(q["end"], "end") if "end" in q else now + 1
            start = _when(q["start"], "start") if "start" in q else end - 30 * 86400
            if end <= start:
                raise BadParam("end", "end must be after start")
            default = "day,tier" if tenant is not None else "tenant,day,tier"
            groups = [g for g in q.get("group_by", default).split(",") if g]
            bad = [g for g in groups if g not in _GROUPS]
            if bad:
                raise BadParam("group_by", f"group_by takes {', '.join(_GROUPS)}; got {', '.join(bad)}")
            fmt = q.get("format") or ("csv" if b"text/csv" in (header(scope, b"accept") or b"") else "json")
            if fmt not in ("json", "csv"):
                raise BadParam("format", f"format is json or csv, got {fmt!r}")
        except BadParam as exc:
            await send_error(send, 400, str(exc), param=exc.param, code="invalid_value")
            return
        if tenant is None and q.get("tenant"):
            tenant = q["tenant"]
        try:
            await self.meter.writer.flush()  # this process's records still on their way (store/writer.py)
            records = await self.meter.store.usage(tenant, start, end)
        except StoreUnavailable as exc:
            await self.shed.refuse(send, 503, f"the usage store is unreachable: {exc}", "store_unavailable", 5)
            return
        rows: list[dict[str, Any]]
        if "records" in groups:
            columns: tuple[str, ...] = COLUMNS
            rows = [{c: getattr(r, c) for c in COLUMNS} for r in records]
        else:
            columns = SUMMARY_COLUMNS
            rows = summarize(records, by_day="day" in groups, by_tier="tier" in groups,
                             by_tenant=tenant is not None or "tenant" in groups)
        if fmt == "csv":
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
            await send_bytes(send, 200, buf.getvalue().encode(), content_type=_CSV)
            return
        await send_json(send, 200, {"object": "usage", "start": start, "end": end, "group_by": groups, "data": rows})

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        if path == "/v1/usage":
            tenant = self.auth.tenant(scope)
            if tenant is None:
                await self.auth.unauthorized(send)
            elif method not in ("GET", "HEAD"):
                await method_not_allowed(send, path, "GET", "HEAD")
            else:
                await self._report(scope, send, tenant.name)
            return
        if not self.auth.admin(scope):
            await self.auth.not_admin(send)
            return
        allowed = ("GET", "HEAD") if path in ROUTES else ("POST", "PUT")
        if method not in allowed:
            await method_not_allowed(send, path, *allowed)
        elif path == "/admin/usage":
            await self._report(scope, send, None)
        elif path == "/admin/budgets":
            flow = self.flow
            await send_json(send, 200, {"budgets": {name: flow.budgets.describe(name) for name in flow.tenants}})
        else:
            await self._set_budget(path.removeprefix("/admin/budgets/"), receive, send)

    async def _set_budget(self, name: str, receive: Receive, send: Send) -> None:
        flow = self.flow
        if name not in flow.tenants:
            await send_error(send, 404, f"no tenant {name!r}", param="tenant", code="not_found")
            return
        body = await read_model(receive, send, BudgetSet, self.admin_max_body)
        if not isinstance(body, BudgetSet):
            return
        now = time.time()
        # A sync reading the store meanwhile keeps this process's new budget.
        with self.meter.local_writes.writing(budget_write(name)):
            try:
                await self.meter.store.set_budget(name, body.turbo_budget_units, body.period)
                spent = await self.meter.store.spent(name, period_key(now, body.period))
            except StoreUnavailable as exc:
                await self.shed.refuse(send, 503, f"the store is unreachable; the budget was not changed: {exc}",
                                       "store_unavailable", 5)
                return
            book = flow.budgets
            book.set_budget(name, body.turbo_budget_units, body.period)
        key = book.start_period(name, now)
        assert key is not None  # the budget was just set
        book.observe(name, key, spent)
        await send_json(send, 200, {"tenant": name, **flow.budgets.describe(name)})
