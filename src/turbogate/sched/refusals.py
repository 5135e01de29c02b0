"""Which rule refused a request that was told to come back later (an answer with ``Retry-After``).

Every such answer is counted once in ``turbogate_shed_total``: ``reason`` is the error code the
client got, ``by`` the rule behind it, so an operator tells overload (L1 queues) from a tenant
over its limits, from a pool with no healthy replica (an outage, not load), from the HTTP
server's own connection cap, from an unreachable store.  The codes are the ones the flow and
the gateway answer; a code not listed here is counted as ``other`` rather than guessed.
"""

from __future__ import annotations

#: L1 admission: the tier's queue is full or over its time budget, a tenant over its share.
BY_L1 = "l1"
#: A tenant's own limits: requests in flight, requests or tokens per minute (sched/metering.py's
#: rule across gateways, and L1's in-flight cap in one worker: the same config field).
BY_TENANT_LIMITS = "tenant_limits"
#: L2 health: no replica of the pool is healthy (the backends are down; retry after the next probe).
BY_HEALTH = "health"
#: The HTTP server's connection cap (uvicorn's ``limit_concurrency``), before any key is read.
BY_HTTP = "http"
#: The shared store is unreachable (usage, budgets, a job run by another worker): retry once it answers.
BY_STORE = "store"
#: A worker's cap on the L4 jobs it runs at once (``jobs.max_jobs``).
BY_JOBS = "jobs"
BY_OTHER = "other"

#: The code of the HTTP server's own refusal over its connection cap (gateway/guard.py).
OVER_CONCURRENCY = "over_concurrency"

_BY_CODE: dict[str, str] = {
    "queue_full": BY_L1, "queue_time_budget": BY_L1, "queue_timeout": BY_L1, "tenant_share": BY_L1,
    "tenant_limit": BY_TENANT_LIMITS, "tenant_rate_limit": BY_TENANT_LIMITS, "tenant_token_limit": BY_TENANT_LIMITS,
    "too_many_leases": BY_TENANT_LIMITS,
    "no_healthy_replica": BY_HEALTH,
    "store_unavailable": BY_STORE,
    "too_many_jobs": BY_JOBS,
    OVER_CONCURRENCY: BY_HTTP,
}


def refused_by(code: str) -> str:
    """The rule behind a refusal with ``Retry-After``, by the error code it answered."""
    return _BY_CODE.get(code, BY_OTHER)
