"""Many gateway processes acting as one, with real processes: two gateways sharing one real
redis-server, and ``--workers 2`` sharing one SQLite file, honour one rate limit and one Turbo
budget; a SIGKILL loses no record of a response the client received whole; a Redis restart
under load fails no request and every buffered record arrives."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import redis
import yaml

from tests.gateway.conftest import ADMIN, KEY, MODEL, gateway_config, pool, wait_for
from turbogate.config import hash_key
from turbogate.procs import Service, start_gateway
from turbogate.store.redisproc import RedisServer

LIMITED_KEY = "sk-limited-test"
BUDGET_KEY = "sk-budget-test"
MSG = [{"role": "user", "content": "hi"}]


def config(emu: Service, store: dict[str, Any], **extra: Any) -> dict[str, Any]:
    cfg = gateway_config([pool("main", [MODEL], [emu.url], max_concurrency=64)], store=store, **extra)
    cfg["tenants"] += [
        {"name": "limited", "key_sha256": hash_key(LIMITED_KEY), "tiers": ["turbo", "standard"],
         "requests_per_minute": 12},
        {"name": "budgeted", "key_sha256": hash_key(BUDGET_KEY), "tiers": ["turbo", "standard"],
         "turbo_budget_units": 300, "budget_period": "day"},
    ]
    return cfg


def get(url: str, path: str, token: str = ADMIN) -> Any:
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read()
    return body if b"format=csv" in path.encode() else orjson.loads(body)


def records(url: str, tenant: str | None = None) -> list[dict[str, Any]]:
    q = "/admin/usage?group_by=records" + (f"&tenant={tenant}" if tenant else "")
    rows: list[dict[str, Any]] = get(url, q)["data"]
    return rows


def wait_minute_start() -> None:
    """Rate limits count per wall-clock minute: start a burst early in one (bounded wait)."""
    while time.time() % 60 > 40:
        time.sleep(0.2)


async def burst(urls: list[str], key: str, n: int, tier: str = "priority", max_tokens: int = 5,
                concurrency: int = 8) -> list[tuple[int, str, str | None]]:
    """``n`` requests spread over ``urls`` at once: (status, tier served header, downgrade header)."""
    clients = [openai.AsyncOpenAI(base_url=u + "/v1", api_key=key, max_retries=0) for u in urls]
    sem = asyncio.Semaphore(concurrency * len(urls))

    async def one(i: int) -> tuple[int, str, str | None]:
        async with sem:
            try:
                raw = await clients[i % len(clients)].chat.completions.with_raw_response.create(
                    model=MODEL, messages=MSG, max_tokens=max_tokens, service_tier=tier)  # type: ignore[arg-type]
            except openai.APIStatusError as exc:
                return exc.status_code, exc.response.headers.get("x-turbogate-tier", ""), None
            return raw.http_response.status_code, raw.headers["x-turbogate-tier"], raw.headers.get(
                "x-turbogate-downgrade")

    try:
        return list(await asyncio.gather(*(one(i) for i in range(n))))
    finally:
        for c in clients:
            await c.close()


async def burst_by_process(urls: list[str], key: str, n: int) -> list[tuple[tuple[int, str, str | None], str]]:
    """``n`` Turbo requests, one at a time per URL: each answer with the process that served it."""
    out = []
    for i in range(n):
        client = openai.AsyncOpenAI(base_url=urls[i % len(urls)] + "/v1", api_key=key, max_retries=0)
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL, messages=MSG, max_tokens=5, service_tier="priority")
            answer = (raw.http_response.status_code, raw.headers["x-turbogate-tier"],
                      raw.headers.get("x-turbogate-downgrade"))
            out.append((answer, raw.headers["x-turbogate-request-id"].rsplit("-", 1)[0]))
        finally:
            await client.close()
    return out


def check_shared_limits_and_budget(urls: list[str], instances_expected: int) -> None:
    def processes_serving() -> bool:  # warm up until every process has served (the kernel picks the worker)
        asyncio.run(burst(urls, KEY, 16, tier="default", concurrency=16))
        return len({r["id"].rsplit("-", 1)[0] for r in records(urls[0], "acme")}) >= instances_expected

    wait_for(processes_serving, what=f"{instances_expected} processes serving")
    wait_minute_start()
    out = asyncio.run(burst(urls, LIMITED_KEY, 30, concurrency=15))
    statuses = sorted(s for s, _, _ in out)
    assert statuses.count(200) == 12 and statuses.count(429) == 18, statuses  # one limit for every process
    # Budget: every request asks Turbo; each costs (prompt + 5) tokens × 2.  Drive all processes at once.
    out = asyncio.run(burst(urls, BUDGET_KEY, 40, concurrency=2))
    assert all(s == 200 for s, _, _ in out)
    downgraded = [d for _, tier, d in out if tier == "standard"]
    assert downgraded and set(downgraded) == {"turbo_budget_spent"}
    rows = records(urls[0], "budgeted")
    turbo = [r for r in rows if r["tier_served"] == "turbo"]
    spent = sum(r["cost_units"] for r in turbo)
    cost = max(r["cost_units"] for r in turbo)
    # Spent up to the budget, overshot by at most the Turbo requests in flight on all processes
    # when it ran out (each process learns the others' spend as its own records are written).
    assert 300 <= spent < 300 + cost * (2 * len(urls) * 2 + len(urls)), (spent, cost)
    # Once the spend is shared, every process serves Standard and says why.  With --workers the
    # kernel picks the process behind one port, so the answer is tracked per process (the record
    # id's prefix names it), not per URL: the admin read and the request may land on different ones.
    last_answer: dict[str, tuple[int, str, str | None]] = {}

    def every_process_downgrades() -> bool:
        for answer, process in asyncio.run(burst_by_process(urls, BUDGET_KEY, 4 * len(urls))):
            last_answer[process] = answer
        return len(last_answer) >= instances_expected and all(
            a == (200, "standard", "turbo_budget_spent") for a in last_answer.values())

    try:
        wait_for(every_process_downgrades, what="the spend to reach every process")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; each process's last answer: {last_answer}") from None


def test_two_gateways_share_one_redis(emulator_factory: Callable[..., Service], redis_server: RedisServer,
                                      tmp_path: Path) -> None:
    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    store = {"kind": "redis", "url": redis_server.url, "prefix": "two-gw", "sync_interval_s": 0.1}
    gws = []
    for i in range(2):
        path = tmp_path / f"gw{i}.yaml"
        path.write_text(yaml.safe_dump(config(emu, store)))
        gws.append(start_gateway(path, log_dir=tmp_path / "logs"))
    try:
        check_shared_limits_and_budget([g.url for g in gws], 2)
        # An admin switch on one gateway reaches the other through the store.
        req = urllib.request.Request(gws[0].url + "/admin/tiers/turbo", data=b'{"enabled": false}', method="POST",
                                     headers={"Authorization": f"Bearer {ADMIN}"})
        urllib.request.urlopen(req, timeout=5).read()
        wait_for(lambda: not get(gws[1].url, "/admin/state")["tiers"]["turbo"]["enabled"], what="switch shared")
    finally:
        for g in gws:
            g.stop()


def test_workers_share_one_sqlite(emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config(emu, {"kind": "sqlite", "path": str(tmp_path / "state.db"),
                                                "sync_interval_s": 0.1})))
    with start_gateway(path, "--workers", "2", log_dir=tmp_path / "logs") as gw:
        check_shared_limits_and_budget([gw.url], 2)


class Load:
    """Client threads sending requests in a loop; each logs the record id of every response it
    received whole, and every failure."""

    def __init__(self, url: str, threads: int = 4, stream_every: int = 3) -> None:
        self.url = url
        self.done: list[tuple[str, int]] = []  # (record id, completion tokens the client saw)
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i, stream_every), daemon=True)
                        for i in range(threads)]

    def _run(self, i: int, stream_every: int) -> None:
        client = openai.OpenAI(base_url=self.url + "/v1", api_key=KEY, max_retries=0, timeout=20)
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                if n % stream_every == 0:
                    with client.chat.completions.with_streaming_response.create(
                            model=MODEL, messages=MSG, max_tokens=6, stream=True,
                            stream_options={"include_usage": True}) as resp:
                        rid = resp.headers["x-turbogate-request-id"]
                        tokens = 0
                        for chunk in resp.parse():
                            if chunk.usage is not None:
                                tokens = chunk.usage.completion_tokens
                        self.done.append((rid, tokens))
                else:
                    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MSG, max_tokens=6)
                    out = raw.parse()
                    assert out.usage is not None
                    self.done.append((raw.headers["x-turbogate-request-id"], out.usage.completion_tokens))
            except Exception as exc:
                self.failed.append(repr(exc))

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


@pytest.fixture(params=["sqlite", "redis"])
def store_for(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[dict[str, Any], Callable[[], Any]]]:
    """The store's config, and a way to hold its writes up for a while (so that a gateway that
    answered before its record was written would be caught out by the kill)."""
    if request.param == "sqlite":
        db = tmp_path / "state.db"

        @contextlib.contextmanager
        def hold_sqlite() -> Iterator[None]:
            conn = sqlite3.connect(db, isolation_level=None)
            conn.execute("BEGIN EXCLUSIVE")  # every writer waits
            try:
                yield
            finally:
                conn.execute("ROLLBACK")
                conn.close()

        yield {"kind": "sqlite", "path": str(db)}, hold_sqlite
    else:
        server: RedisServer = request.getfixturevalue("redis_server")

        @contextlib.contextmanager
        def hold_redis() -> Iterator[None]:
            r = redis.Redis.from_url(server.url)
            r.execute_command("CLIENT", "PAUSE", "3000", "ALL")
            try:
                yield
            finally:
                r.execute_command("CLIENT", "UNPAUSE")
                r.close()

        yield {"kind": "redis", "url": server.url, "prefix": f"kill-{tmp_path.name}"}, hold_redis


def test_sigkill_loses_no_record_of_a_completed_response(
        emulator_factory: Callable[..., Service], store_for: tuple[dict[str, Any], Callable[[], Any]],
        tmp_path: Path) -> None:
    store, hold = store_for
    emu = emulator_factory("--time-scale", "0.02", "--model", MODEL)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config(emu, store)))
    gw = start_gateway(path, log_dir=tmp_path / "logs")
    with Load(gw.url) as load:
        wait_for(lambda: len(load.done) >= 40, what="load under way")
        with hold():
            # Writes now wait (then, after store.timeout_s, go to the local buffer).  Kill while
            # they wait: a response sent ahead of its record would lose the record.
            time.sleep(0.4)
            gw.kill()  # SIGKILL mid-load
    assert load.failed  # the kill cut some requests short
    completed = dict(load.done)
    gw = start_gateway(path, log_dir=tmp_path / "logs", port=None)  # replays a dead process's buffer
    try:
        stored = {r["id"]: r for r in records(gw.url, "acme")}
        missing = [rid for rid in completed if rid not in stored]
        assert not missing, f"{len(missing)} of {len(completed)} completed responses have no usage record"
        assert all(stored[rid]["status"] == 200 and stored[rid]["completion_tokens"] == tokens
                   for rid, tokens in completed.items())
    finally:
        gw.stop()


def test_redis_restart_under_load_fails_nothing(emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    emu = emulator_factory("--time-scale", "0.02", "--model", MODEL)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config(emu, {"kind": "redis", "url": server.url, "timeout_s": 0.5,
                                                "retry_interval_s": 0.2})))
    try:
        with start_gateway(path, log_dir=tmp_path / "logs") as gw:
            def ready() -> dict[str, Any]:
                with urllib.request.urlopen(gw.url + "/ready", timeout=5) as resp:
                    out: dict[str, Any] = orjson.loads(resp.read())
                return out

            with Load(gw.url) as load:
                wait_for(lambda: len(load.done) >= 20, what="load under way")
                server.stop()
                wait_for(lambda: ready().get("status") == "degraded", what="/ready degraded")
                during = len(load.done)
                wait_for(lambda: len(load.done) >= during + 20, what="serving while Redis is down")
                server.start()
                wait_for(lambda: "status" not in ready(), what="store back")
                after = len(load.done)
                wait_for(lambda: len(load.done) >= after + 10, what="serving after Redis is back")
            assert not load.failed, load.failed[:3]

            def replayed() -> bool:
                state = get(gw.url, "/admin/state")["store"]
                return bool(state["buffered"] > 0 and not state["degraded"] and state["replayed"] == state["buffered"])

            wait_for(replayed, what="every buffered record replayed")
            stored = {r["id"] for r in records(gw.url, "acme")}
            missing = [rid for rid, _ in load.done if rid not in stored]
            assert not missing, f"{len(missing)} of {len(load.done)} responses have no usage record"
            assert "unreachable" in gw.log_text() and "replayed" in gw.log_text()
    finally:
        server.stop()
