"""The routes beside the proxy (usage, budgets, jobs, leases) count their ``Retry-After`` answers
in ``turbogate_shed_total`` like the flow's: a store that cannot be reached (``by="store"``) and
a tenant at its lease cap (``by="tenant_limits"``).  A real gateway whose Redis store has nothing
listening, on loopback."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import httpx

from tests.gateway.conftest import ADMIN, KEY, MODEL, gateway_config, pool
from tests.gateway.test_retry_after_metering import sheds
from turbogate.procs import Service, free_port
from turbogate.sched.refusals import BY_JOBS, BY_STORE, BY_TENANT_LIMITS, refused_by


def _nothing_listens() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"  # closed again: nothing listens there


def test_route_refusal_codes_name_their_rule() -> None:
    assert refused_by("store_unavailable") == BY_STORE
    assert refused_by("too_many_leases") == BY_TENANT_LIMITS
    assert refused_by("too_many_jobs") == BY_JOBS


def test_usage_jobs_and_lease_routes_count_their_retry_after(
        gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    cfg = gateway_config([pool("p", [MODEL], [f"http://127.0.0.1:{free_port()}"])],
                         store={"kind": "redis", "url": _nothing_listens(), "timeout_s": 0.2},
                         leases={"max_per_tenant": 1})
    gw = gateway_factory(cfg)
    tenant = {"Authorization": f"Bearer {KEY}"}
    admin = {"Authorization": f"Bearer {ADMIN}"}
    answers: list[httpx.Response] = [
        httpx.get(gw.url + "/v1/usage", headers=tenant, timeout=30),
        httpx.post(gw.url + "/admin/budgets/acme", headers=admin, json={"turbo_budget_units": 5}, timeout=30),
        httpx.get(gw.url + "/v1/jobs/job_run_elsewhere", headers=tenant, timeout=30),
    ]
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "store_unavailable"
        assert int(answer.headers["retry-after"]) >= 1

    first = httpx.post(gw.url + "/v1/turbo/leases", headers=tenant, timeout=30)
    assert first.status_code == 201, first.text  # kept by this process while the store is down
    second = httpx.post(gw.url + "/v1/turbo/leases", headers=tenant, timeout=30)
    assert second.status_code == 429 and second.json()["error"]["code"] == "too_many_leases"
    assert int(second.headers["retry-after"]) >= 1

    assert sheds(gw.url) == {("store_unavailable", BY_STORE): 3.0, ("too_many_leases", BY_TENANT_LIMITS): 1.0}
