"""``--workers 2``: uvicorn worker processes each run the app (each with its own state)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import openai
import yaml

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool
from turbogate.procs import Service, start_gateway


def test_two_workers_serve(emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(gateway_config([pool("main", [MODEL], [emu.url])])))
    with start_gateway(path, "--workers", "2", log_dir=tmp_path / "logs") as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
        for _ in range(6):
            out = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=3, service_tier="priority")
            assert out.service_tier == "turbo"
