"""Redis through redis-py's asyncio client: the store for several hosts.  Adding usage (with the
Turbo spend it charges) and taking a tenant's limit place are each one Lua script, so N
gateways enforce one limit and one budget.  A record is stored once however often it is
replayed: it is a sorted-set member, and its JSON is the same bytes every time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from turbogate.sched.metering import LimitPolicy, LimitRefusal, UsageRecord, limit_refusal, minute_of, spend_keys
from turbogate.store.base import (
    Budgets,
    JobRecord,
    LeaseRecord,
    Spent,
    StoreUnavailable,
)
from turbogate.store.records import record_from_json, record_to_json

_ADD_USAGE = """
local p = ARGV[1]
local out = {}
local i = 2
while i <= #ARGV do
  local tenant, ts, json, units, nkeys = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4])
  if redis.call('ZADD', p .. ':usage:' .. tenant, 'NX', ts, json) == 1 then
    redis.call('SADD', p .. ':tenants', tenant)
    for k = 1, nkeys do
      local key = ARGV[i + 4 + k]
      out[#out + 1] = tenant
      out[#out + 1] = key
      out[#out + 1] = redis.call('HINCRBYFLOAT', p .. ':spend:' .. tenant, key, units)
    end
  end
  i = i + 5 + nkeys
end
return out
"""

_ACQUIRE = """
local p, tenant, lease = ARGV[1], ARGV[2], ARGV[3]
local ts, lease_s = tonumber(ARGV[4]), tonumber(ARGV[5])
local max_in_flight, rpm, tpm, minute = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local lk = p .. ':leases:' .. tenant
redis.call('ZREMRANGEBYSCORE', lk, '-inf', ts)
local in_flight = redis.call('ZCARD', lk)
local mk = p .. ':minute:' .. tenant .. ':' .. minute
local requests = tonumber(redis.call('HGET', mk, 'r') or '0')
local tokens = tonumber(redis.call('HGET', mk, 't') or '0')
if (max_in_flight >= 0 and in_flight >= max_in_flight) or (rpm >= 0 and requests >= rpm)
   or (tpm >= 0 and tokens >= tpm) then
  return {1, in_flight, requests, tokens}
end
redis.call('ZADD', lk, ts + lease_s, lease)
redis.call('EXPIRE', lk, math.ceil(lease_s) + 60)
redis.call('HINCRBY', mk, 'r', 1)
redis.call('EXPIRE', mk, 180)
return {0, in_flight, requests, tokens}
"""

_RELEASE = """
local p, tenant, lease, tokens, minute = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
redis.call('ZREM', p .. ':leases:' .. tenant, lease)
local mk = p .. ':minute:' .. tenant .. ':' .. minute
redis.call('HINCRBY', mk, 't', tokens)
redis.call('EXPIRE', mk, 180)
return 0
"""

# A Turbo lease: hash {v: version, r: the record's JSON}, gone by itself at its forget_at; a
# per-tenant sorted set (score: forget_at) lists a tenant's leases.  Compare-and-set on v.
_PUT_LEASE = """
local p, id, tenant, expect, json, forget, ts = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local k = p .. ':turbo-lease:' .. id
local cur = redis.call('HGET', k, 'v')
if (expect == '' and cur) or (expect ~= '' and cur ~= expect) then
  return 0
end
local v = (tonumber(expect) or 0) + 1
redis.call('HSET', k, 'v', v, 'r', json)
redis.call('EXPIREAT', k, math.ceil(tonumber(forget)))
local tk = p .. ':turbo-leases:' .. tenant
redis.call('ZREMRANGEBYSCORE', tk, '-inf', ts)
redis.call('ZADD', tk, forget, id)
redis.call('EXPIREAT', tk, math.ceil(tonumber(redis.call('ZREVRANGE', tk, 0, 0, 'WITHSCORES')[2])))
return 1
"""

# A job: hash {tenant, owner, view, cancel}; writing the view keeps a cancel already asked for.
_PUT_JOB = """
local k, tenant, owner, view, cancel, forget = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
redis.call('HSET', k, 'tenant', tenant, 'owner', owner, 'view', view)
if cancel == '1' then redis.call('HSET', k, 'cancel', '1') end
redis.call('EXPIREAT', k, math.ceil(tonumber(forget)))
return 0
"""

_CANCEL_JOB = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'cancel', '1')
return 1
"""


def _opt(v: int | None) -> int:
    return -1 if v is None else v


def persistence_warning(save: str, appendonly: str) -> str | None:
    """What a Redis server with these ``CONFIG GET`` values loses of the usage records at a
    restart, or None when its append-only file keeps them (docs/metering.md)."""
    if appendonly.strip().lower() == "yes":
        return None
    if not save.strip():
        return ("keeps nothing on disk (save '' and appendonly no): a restart of redis-server loses every usage "
                "record, budget spend and switch; start it with --appendonly yes")
    return (f"keeps only snapshots (save {save.strip()!r}, appendonly no): a crash of redis-server loses the usage "
            "records written since the last one; start it with --appendonly yes")


class RedisStore:
    def __init__(self, url: str, prefix: str = "turbogate", timeout_s: float = 1.0) -> None:
        self.url = url
        self.prefix = prefix
        self.timeout_s = timeout_s
        self._r: Any = None
        self._scripts: dict[str, Any] = {}

    def _client(self) -> Any:
        if self._r is None:
            import redis.asyncio as aioredis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
            from redis.exceptions import ConnectionError as RedisConnectionError

            # One quick retry: a pooled connection left over from before a Redis restart fails
            # once, and the retry takes a fresh one.  Longer outages are ResilientStore's job.
            self._r = aioredis.from_url(self.url, socket_timeout=self.timeout_s,
                                        socket_connect_timeout=self.timeout_s, health_check_interval=0,
                                        retry=Retry(NoBackoff(), 1), retry_on_error=[RedisConnectionError])
            for name, text in (("add", _ADD_USAGE), ("acquire", _ACQUIRE), ("release", _RELEASE),
                               ("put_lease", _PUT_LEASE), ("put_job", _PUT_JOB), ("cancel_job", _CANCEL_JOB)):
                self._scripts[name] = self._r.register_script(text)
        return self._r

    async def _call(self, what: str, coro: Any) -> Any:
        import redis.exceptions

        try:
            return await coro
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
            raise StoreUnavailable(f"Redis store {self.url}: {what}: {exc}") from exc

    async def open(self) -> None:
        await self.ping()

    async def close(self) -> None:
        if self._r is not None:
            await self._r.aclose()
            self._r = None

    async def ping(self) -> None:
        await self._call("ping", self._client().ping())

    async def durability(self) -> str | None:
        """:func:`persistence_warning` for this server, read with ``CONFIG GET``; a server that
        refuses CONFIG (a managed Redis may) gets a warning that says it could not be checked."""
        import redis.exceptions

        try:
            save = await self._call("config get", self._client().config_get("save"))
            appendonly = await self._call("config get", self._client().config_get("appendonly"))
        except redis.exceptions.ResponseError as exc:
            return f"refused CONFIG GET ({exc}), so whether usage records survive its restart is unknown: " \
                   "check that it runs with appendonly yes"
        return persistence_warning(str(save.get("save", "")), str(appendonly.get("appendonly", "")))

    async def add_usage(self, records: Sequence[UsageRecord]) -> Spent:
        args: list[Any] = [self.prefix]
        for r in records:
            keys = spend_keys(r)
            args += [r.tenant, repr(r.ts), record_to_json(r), repr(r.turbo_units), len(keys), *keys]
        self._client()
        flat = await self._call("add usage", self._scripts["add"](args=args))
        return {(flat[i].decode(), flat[i + 1].decode()): float(flat[i + 2]) for i in range(0, len(flat), 3)}

    async def usage(self, tenant: str | None, since: float, until: float) -> list[UsageRecord]:
        r = self._client()
        tenants = [tenant] if tenant is not None else sorted(
            t.decode() for t in await self._call("tenants", r.smembers(f"{self.prefix}:tenants")))
        out: list[UsageRecord] = []
        for t in tenants:
            rows = await self._call("usage", r.zrangebyscore(f"{self.prefix}:usage:{t}", since, f"({until}"))
            out.extend(record_from_json(row) for row in rows)
        out.sort(key=lambda rec: (rec.ts, rec.id))
        return out

    async def spent(self, tenant: str, key: str) -> float:
        v = await self._call("spent", self._client().hget(f"{self.prefix}:spend:{tenant}", key))
        return float(v) if v is not None else 0.0

    async def budgets(self) -> Budgets:
        raw = await self._call("budgets", self._client().hgetall(f"{self.prefix}:budgets"))
        out: Budgets = {}
        for k, v in raw.items():
            units, period = orjson.loads(v)
            out[k.decode()] = (units, period)
        return out

    async def set_budget(self, tenant: str, units: float | None, period: str) -> None:
        await self._call("set budget", self._client().hset(f"{self.prefix}:budgets", tenant,
                                                           orjson.dumps([units, period])))

    async def switches(self) -> dict[str, bool]:
        raw = await self._call("switches", self._client().hgetall(f"{self.prefix}:switches"))
        return {k.decode(): v == b"1" for k, v in raw.items()}

    async def set_switch(self, name: str, on: bool) -> None:
        await self._call("set switch", self._client().hset(f"{self.prefix}:switches", name, "1" if on else "0"))

    async def learned_limits(self) -> dict[str, str]:
        raw = await self._call("learned limits", self._client().hgetall(f"{self.prefix}:learned_limits"))
        return {k.decode(): v.decode() for k, v in raw.items()}

    async def put_learned_limits(self, limits: Mapping[str, str]) -> None:
        if limits:
            await self._call("put learned limits",
                             self._client().hset(f"{self.prefix}:learned_limits", mapping=dict(limits)))

    async def acquire(self, tenant: str, limits: LimitPolicy, lease: str, ts: float,
                      lease_s: float) -> LimitRefusal | None:
        self._client()
        refused, in_flight, requests, tokens = await self._call("acquire", self._scripts["acquire"](args=[
            self.prefix, tenant, lease, repr(ts), repr(lease_s), _opt(limits.max_in_flight),
            _opt(limits.requests_per_minute), _opt(limits.tokens_per_minute), minute_of(ts)]))
        if not refused:
            return None
        # The script refused; the pure rule words the refusal (and is the same rule).
        return limit_refusal(limits, int(in_flight), int(requests), int(tokens), ts) or LimitRefusal(
            "tenant_rate_limit", "the tenant is over a limit", 1)

    async def release(self, tenant: str, lease: str, tokens: int, ts: float) -> None:
        self._client()
        await self._call("release", self._scripts["release"](args=[self.prefix, tenant, lease, tokens,
                                                                   minute_of(ts)]))

    # ---- Turbo leases and jobs ----------------------------------------------------------------
    async def turbo_lease(self, lease_id: str) -> LeaseRecord | None:
        v, raw = await self._call("turbo lease", self._client().hmget(f"{self.prefix}:turbo-lease:{lease_id}",
                                                                       "v", "r"))
        return None if v is None or raw is None else LeaseRecord.from_json(lease_id, raw, int(v))

    async def turbo_leases(self, tenant: str, ts: float) -> list[LeaseRecord]:
        ids = await self._call("turbo leases", self._client().zrangebyscore(
            f"{self.prefix}:turbo-leases:{tenant}", f"({ts!r}", "+inf"))
        out = []
        for raw_id in ids:
            rec = await self.turbo_lease(raw_id.decode())
            if rec is not None:
                out.append(rec)
        return out

    async def put_turbo_lease(self, rec: LeaseRecord, expect_version: int | None, ts: float) -> bool:
        self._client()
        done = await self._call("put turbo lease", self._scripts["put_lease"](args=[
            self.prefix, rec.id, rec.tenant, "" if expect_version is None else str(expect_version), rec.to_json(),
            repr(rec.forget_at), repr(ts)]))
        return bool(done)

    def _job_key(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    async def job(self, job_id: str) -> JobRecord | None:
        tenant, owner, view, cancel = await self._call("job", self._client().hmget(
            self._job_key(job_id), "tenant", "owner", "view", "cancel"))
        if tenant is None or view is None:
            return None
        return JobRecord(job_id, tenant.decode(), (owner or b"").decode(), bytes(view), cancel == b"1")

    async def put_job(self, rec: JobRecord, forget_at: float, ts: float) -> None:
        self._client()
        await self._call("put job", self._scripts["put_job"](keys=[self._job_key(rec.id)], args=[
            rec.tenant, rec.owner, rec.view, "1" if rec.cancel_requested else "0", repr(forget_at)]))

    async def request_job_cancel(self, job_id: str) -> bool:
        self._client()
        return bool(await self._call("cancel job", self._scripts["cancel_job"](keys=[self._job_key(job_id)])))

    async def job_cancels(self, job_ids: Sequence[str]) -> set[str]:
        if not job_ids:
            return set()
        r = self._client()
        pipe = r.pipeline(transaction=False)
        for i in job_ids:
            pipe.hget(self._job_key(i), "cancel")
        flags = await self._call("job cancels", pipe.execute())
        return {i for i, f in zip(job_ids, flags, strict=True) if f == b"1"}
