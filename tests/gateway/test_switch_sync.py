"""A sync with the store does not undo an admin switch or budget made while it was reading the store.

The race: a sync reads the stored switches (Turbo off, from an earlier switch), an admin switches
Turbo back on meanwhile, and the sync then applies the value it read.  A real SQLite store; the
read is held open by an event so that the interleaving is certain, not a matter of timing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.gateway.conftest import gateway_config, pool
from turbogate.config import parse_config
from turbogate.gateway.metering import Metering
from turbogate.gateway.runtime import build_runtime
from turbogate.gateway.usage_api import UsageApi
from turbogate.sched import Tier
from turbogate.sched.switches import tenant_switch, tier_switch


def make_meter(tmp_path: Path) -> Metering:
    cfg = parse_config(gateway_config(
        [pool("fast", ["m"], ["http://127.0.0.1:9"])],
        store={"kind": "sqlite", "path": str(tmp_path / "state.sqlite3"), "buffer_dir": str(tmp_path / "buffer")}))
    return Metering(cfg, build_runtime(cfg).flow, {}, 30.0)


async def held_sync(meter: Metering, read_name: str, reading: asyncio.Event,
                    during_read: asyncio.Future[None]) -> None:
    """A sync whose store read ``read_name`` sets ``reading`` once it has read, and returns what it
    read only once ``during_read`` is done."""
    read: Callable[[], Awaitable[Any]] = getattr(meter.store, read_name)

    async def slow_read() -> Any:
        stored = await read()
        reading.set()
        await during_read
        return stored

    setattr(meter.store, read_name, slow_read)
    try:
        await meter.sync()
    finally:
        setattr(meter.store, read_name, read)


async def set_budget(api: UsageApi, tenant: str, units: float) -> int:
    """``POST /admin/budgets/{tenant}`` through the API's own handler; its status."""
    body = json.dumps({"turbo_budget_units": units, "period": "month"}).encode()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await api._set_budget(tenant, receive, send)
    return int(sent[0]["status"])


async def test_a_switch_made_during_the_read_is_kept(tmp_path: Path) -> None:
    meter = make_meter(tmp_path)
    flow = meter.flow
    await meter.start()
    try:
        flow.set_tier(Tier.TURBO, False)  # as the admin API does: here at once, then the store
        await meter.share_switch(tier_switch(Tier.TURBO), False)
        flow.set_tenant_turbo("acme", False)
        await meter.share_switch(tenant_switch("acme"), False)

        switched_back: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        reading = asyncio.Event()
        sync = asyncio.create_task(held_sync(meter, "switches", reading, switched_back))
        await reading.wait()  # the sync has read the store: Turbo off
        flow.set_tier(Tier.TURBO, True)
        await meter.share_switch(tier_switch(Tier.TURBO), True)
        flow.set_tenant_turbo("acme", True)
        await meter.share_switch(tenant_switch("acme"), True)
        switched_back.set_result(None)
        await sync
        assert Tier.TURBO in flow.enabled
        assert "acme" not in flow.turbo_off

        # The next sync reads the store as it now is: still on.
        await meter.sync()
        assert Tier.TURBO in flow.enabled and "acme" not in flow.turbo_off
    finally:
        await meter.stop()


async def test_another_process_switch_is_still_applied(tmp_path: Path) -> None:
    meter = make_meter(tmp_path)
    await meter.start()
    try:
        await meter.store.set_switch(tier_switch(Tier.TURBO), False)  # written by another process
        await meter.sync()
        assert Tier.TURBO not in meter.flow.enabled
    finally:
        await meter.stop()


async def test_a_budget_set_during_the_read_is_kept(tmp_path: Path) -> None:
    meter = make_meter(tmp_path)
    api = UsageApi(None, meter.flow, meter, None, 4096)  # type: ignore[arg-type]  # (no auth or shed used)
    await meter.start()
    try:
        assert await set_budget(api, "acme", 100.0) == 200
        set_again: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        reading = asyncio.Event()
        sync = asyncio.create_task(held_sync(meter, "budgets", reading, set_again))
        await reading.wait()  # the sync has read the store: 100 units
        assert await set_budget(api, "acme", 5.0) == 200
        set_again.set_result(None)
        await sync
        assert meter.flow.budgets.describe("acme")["turbo_budget_units"] == 5.0
        await meter.sync()
        assert meter.flow.budgets.describe("acme")["turbo_budget_units"] == 5.0
    finally:
        await meter.stop()
