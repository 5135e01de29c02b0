"""What an operator sees: start-up lines, one warning per ejection with its reason, the recovery,
and a 503 that tells "backends down" from overload (issue 18)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import yaml

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, wait_for
from turbogate.procs import Service, start_emulator, start_gateway

MSG = [{"role": "user", "content": "hi"}]


def test_ejection_and_recovery_are_logged_once_with_the_reason(tmp_path: Path,
                                                              emulator_factory: Callable[..., Service]) -> None:
    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    cfg = gateway_config([pool("solo", [MODEL], [emu.url])])
    (tmp_path / "gw.yaml").write_text(yaml.safe_dump(cfg))
    gw = start_gateway(tmp_path / "gw.yaml", log_dir=tmp_path / "gwlogs")  # the default log level
    back: Service | None = None
    try:
        wait_for(lambda: "pool solo" in gw.log_text(), what="start-up lines")
        assert "tiers: turbo (on" in gw.log_text()
        assert "Uvicorn running on" in gw.log_text()  # the listening address
        emu.kill()
        wait_for(lambda: "ejected" in gw.log_text(), what="an ejection warning")
        r = httpx.post(gw.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                       json={"model": MODEL, "messages": MSG, "max_tokens": 2}, timeout=30)
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_healthy_replica", r.text
        assert "not an overload" in r.json()["error"]["message"] and int(r.headers["retry-after"]) >= 1
        back = start_emulator("--time-scale", "0", "--model", MODEL, port=emu.port, log_dir=tmp_path / "emulogs")
        wait_for(lambda: "is back" in gw.log_text(), what="a recovery line")
        lines = gw.log_text().splitlines()
        ejected = [line for line in lines if "ejected" in line]
        assert len(ejected) == 1, ejected
        assert "WARNING" in ejected[0] and emu.url in ejected[0] and "refused" in ejected[0]
        recovered = [line for line in lines if "is back" in line]
        assert len(recovered) == 1 and emu.url in recovered[0]
        assert KEY not in gw.log_text()
    finally:
        gw.stop()
        if back is not None:
            back.stop()


def test_an_engine_whose_metrics_never_show_our_load_is_named_in_a_warning(tmp_path: Path) -> None:
    """The neutral stub (benchmarks/openai_stub.py) answers instantly and its /metrics always says
    0 running: declared as an engine with load metrics, its adaptive limit can never grow past the
    initial 8, and the operator is told why and what to set."""
    import asyncio
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from openai_stub import start_stub

    stub, url = start_stub()
    cfg = gateway_config([pool("solo", [MODEL], [url], max_concurrency=1024)])
    (tmp_path / "gw.yaml").write_text(yaml.safe_dump(cfg))
    gw = start_gateway(tmp_path / "gw.yaml", log_dir=tmp_path / "gwlogs")

    async def bursts() -> None:
        # 48 clients, each sending streams back to back: a stream holds its slot for its 256
        # chunks, so the gateway keeps its 8 slots busy however fast it turns one request around
        # (instant one-chunk answers finished faster than the client sent the next).
        async with httpx.AsyncClient(base_url=gw.url, headers={"Authorization": f"Bearer {KEY}"},
                                     timeout=30) as client:
            deadline = asyncio.get_running_loop().time() + 60
            warned = asyncio.Event()  # one reader of the log for all clients, not a read per request

            async def watch_log() -> None:
                while "reported 0 requests running" not in gw.log_text():
                    assert asyncio.get_running_loop().time() < deadline, "no warning within 60 s"
                    await asyncio.sleep(0.1)
                warned.set()

            async def one_client() -> None:
                while not warned.is_set():
                    answer = await client.post("/v1/chat/completions", json={
                        "model": MODEL, "messages": MSG, "max_tokens": 256, "stream": True})
                    assert answer.status_code == 200, answer.text

            await asyncio.gather(watch_log(), *(one_client() for _ in range(48)))

    try:
        asyncio.run(bursts())
        warned = [line for line in gw.log_text().splitlines() if "reported 0 requests running" in line]
        assert len(warned) == 1 and "WARNING" in warned[0] and "engine: openai" in warned[0]
        assert KEY not in gw.log_text()
    finally:
        gw.stop()
        stub.kill()
        stub.wait()
