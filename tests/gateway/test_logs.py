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
