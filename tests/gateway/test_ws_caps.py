"""Lease WebSockets are capped (issue 43, point 3): a message past ``limits.ws_max_message_bytes``
closes its connection (1009, with a reason) before it is buffered, and connections past
``limits.ws_max_connections_per_tenant`` or ``limits.ws_max_connections`` are closed at once
(1013, with a reason that names the cap).  On a real gateway, with the ``websockets`` client."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.gateway.conftest import KEY, MODEL, TINY_KEY, gateway_config, pool
from turbogate.procs import Service, start_emulator, start_gateway

FLOOD_CLIENTS = 32
FLOOD_BYTES = 15 * 1024 * 1024


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def lease(url: str, key: str) -> str:
    resp = httpx.post(url + "/v1/turbo/leases", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert resp.status_code == 201, resp.text
    lease_id: str = resp.json()["id"]
    return lease_id


def ws_url(gw: Service, lease_id: str) -> str:
    return gw.url.replace("http://", "ws://") + f"/v1/turbo/leases/{lease_id}/ws"


async def open_ws(gw: Service, lease_id: str, key: str) -> ClientConnection:
    return await connect(ws_url(gw, lease_id), additional_headers={"Authorization": f"Bearer {key}"},
                         max_size=None, open_timeout=20, close_timeout=20)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    emu = start_emulator("--time-scale", "0", "--model", MODEL, log_dir=tmp_path_factory.mktemp("emu"))
    yield emu
    emu.stop()


def _gateway(emulator: Service, folder: Path, **limits: int) -> Service:
    config = folder / "gw.yaml"
    config.write_text(yaml.safe_dump(gateway_config([pool("main", [MODEL], [emulator.url])], limits=limits)))
    return start_gateway(config, log_dir=folder / "logs")


class RssWatch:
    """The gateway's resident memory, sampled every 20 ms from another thread (its peak is the figure)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = rss_kb(pid)
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_kb(self.pid))

    def stop(self) -> int:
        """Growth in KiB at the peak."""
        self._stop.set()
        self._thread.join()
        return self.peak - self.before


async def _flood(gw: Service, lease_id: str) -> list[tuple[int | None, str]]:
    payload = b"x" * FLOOD_BYTES

    async def one() -> tuple[int | None, str]:
        ws = await open_ws(gw, lease_id, KEY)
        try:
            await ws.recv()  # the lease's state, or the close of a refused connection
            await ws.send(payload)
            while True:
                await ws.recv()
        except ConnectionClosed as exc:
            return (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd is not None else (None, "")
        finally:
            await ws.close()

    return await asyncio.wait_for(asyncio.gather(*(one() for _ in range(FLOOD_CLIENTS))), timeout=120)


def test_32_clients_sending_15_mib_are_refused_with_a_reason(emulator: Service, tmp_path: Path) -> None:
    with _gateway(emulator, tmp_path) as gw:
        lease_id = lease(gw.url, KEY)
        watch = RssWatch(gw.process.pid)
        closes = asyncio.run(_flood(gw, lease_id))
        growth_kb = watch.stop()
        print(f"\nws flood: {FLOOD_CLIENTS} clients x 15 MiB, closes {sorted(set(c for c, _ in closes), key=str)}, "
              f"gateway RSS {watch.before / 1024:.0f} MiB, growth at peak {growth_kb / 1024:.1f} MiB")
        assert all(code in (1009, 1013) and reason for code, reason in closes), closes
        assert {code for code, _ in closes} == {1009, 1013}  # 16 over the message cap, 16 over the tenant's
        assert growth_kb < 50 * 1024
        # The gateway still serves heartbeats after it.
        assert httpx.post(gw.url + f"/v1/turbo/leases/{lease_id}/heartbeat",
                          headers={"Authorization": f"Bearer {KEY}"}, timeout=10).status_code == 200


async def _caps(gw: Service) -> None:
    acme, tiny = lease(gw.url, KEY), lease(gw.url, TINY_KEY)
    first = [await open_ws(gw, acme, KEY) for _ in range(2)]
    for ws in first:
        assert '"state":"active"' in str(await ws.recv())
    over_tenant = await open_ws(gw, acme, KEY)
    with pytest.raises(ConnectionClosed) as caught:
        await over_tenant.recv()
    assert caught.value.rcvd is not None and caught.value.rcvd.code == 1013
    assert "ws_max_connections_per_tenant" in caught.value.rcvd.reason
    other = await open_ws(gw, tiny, TINY_KEY)  # another tenant: the third of three in all
    assert '"state":"active"' in str(await other.recv())
    over_total = await open_ws(gw, tiny, TINY_KEY)
    with pytest.raises(ConnectionClosed) as caught:
        await over_total.recv()
    assert caught.value.rcvd is not None and "limits.ws_max_connections)" in caught.value.rcvd.reason
    # A heartbeat of a few bytes is served; a message over the cap closes with 1009.
    await first[0].send("ping")
    assert '"renewed"' in str(await first[0].recv())
    await first[0].send("x" * 2000)
    with pytest.raises(ConnectionClosed) as caught:
        await first[0].recv()
    assert caught.value.rcvd is not None and caught.value.rcvd.code == 1009 and caught.value.rcvd.reason
    # The closed connection's place is free again (the server counts it closed once its handler ends).
    deadline = time.monotonic() + 10
    while True:
        again = await open_ws(gw, acme, KEY)
        try:
            assert '"state":"active"' in str(await again.recv())
            break
        except ConnectionClosed:
            assert time.monotonic() < deadline, "the closed connection's place was never freed"
            await asyncio.sleep(0.1)
    for ws in (first[1], other, again):
        await ws.close()


def test_connection_caps_per_tenant_and_in_all(emulator: Service, tmp_path: Path) -> None:
    with _gateway(emulator, tmp_path, ws_max_connections=3, ws_max_connections_per_tenant=2,
                  ws_max_message_bytes=1024) as gw:
        asyncio.run(asyncio.wait_for(_caps(gw), timeout=60))
