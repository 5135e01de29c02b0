"""Deploy test helpers: find the real tools (hadolint, kubectl, promtool, prometheus).

A missing tool skips its tests with the reason on a developer's machine; under CI (``CI`` set,
where .ci/run installs them all) it fails instead, so a green CI never hides an unchecked file.
"""

from __future__ import annotations

import os
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, wait_for
from turbogate.procs import Service, start_emulator, start_gateway

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def tool(name: str, install: str) -> str:
    """The path of ``name`` (the virtual environment's bin first, then PATH)."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        message = f"{name} is not installed ({install}; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Service]]:
    """A real emulator and a real gateway in front of it, after one streamed and one plain
    request (so the request-path histograms have samples)."""
    folder = tmp_path_factory.mktemp("live")
    emulator = start_emulator("--time-scale", "0", "--model", MODEL, "--seed", "1", log_dir=folder)
    config = folder / "gateway.yaml"
    config.write_text(yaml.safe_dump(gateway_config([pool("p", [MODEL], [emulator.url])])))
    try:
        gateway = start_gateway(config, log_dir=folder)
    except Exception:
        emulator.stop()
        raise
    try:
        wait_for(lambda: _get(gateway.url + "/ready")[0] == 200, what="gateway ready")
        for stream in (False, True):
            body = orjson.dumps({"model": MODEL, "max_tokens": 4, "stream": stream, "service_tier": "turbo",
                                 "messages": [{"role": "user", "content": "hi"}]})
            req = urllib.request.Request(gateway.url + "/v1/chat/completions", data=body, method="POST",
                                         headers={"Authorization": f"Bearer {KEY}",
                                                  "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.status == 200
                resp.read()
        yield gateway, emulator
    finally:
        gateway.stop()
        emulator.stop()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def get(url: str) -> bytes:
    status, body = _get(url)
    assert status == 200, f"{url}: {status} {body[:200]!r}"
    return body
