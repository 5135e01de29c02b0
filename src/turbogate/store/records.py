"""A usage record as one JSON object: the line format of the usage journal and the store's
buffer, and Redis's stored form.  A module of its own so a compiled build runs it as C (each
answer's record is encoded once, into the journal, on the request path)."""

from __future__ import annotations

from typing import Any

import orjson

from turbogate.sched.metering import UsageRecord


def record_to_json(rec: UsageRecord) -> bytes:
    return orjson.dumps({"id": rec.id, "ts": rec.ts, "tenant": rec.tenant, "model": rec.model,
                         "tier_asked": rec.tier_asked, "tier_served": rec.tier_served, "status": rec.status,
                         "prompt_tokens": rec.prompt_tokens, "completion_tokens": rec.completion_tokens,
                         "queue_s": rec.queue_s, "latency_s": rec.latency_s, "cost_units": rec.cost_units,
                         "downgrade": rec.downgrade})


def record_from_json(raw: bytes | str) -> UsageRecord:
    d: dict[str, Any] = orjson.loads(raw)
    return UsageRecord(d["tenant"], d["model"], d["tier_asked"], d["tier_served"], d["status"], d["prompt_tokens"],
                       d["completion_tokens"], d["queue_s"], d["latency_s"], d["cost_units"], d.get("downgrade"),
                       0.0, d["ts"], d["id"])
