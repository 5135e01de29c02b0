"""What the gateway says at start: a public /metrics that names tenants is warned about; a replica whose engine
has not started yet is "not up yet", then "is up" — never "ejected" (issue 42)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from turbogate.config import hash_key
from turbogate.procs import Service, free_port, start_emulator, start_gateway

MODEL = "llama-3.2-1b"


def _config(folder: Path, replica_url: str, **extra: Any) -> Path:
    cfg = {"tenants": [{"name": "t", "key_sha256": hash_key("k")}],
           "pools": [{"name": "p", "models": [MODEL], "replicas": [{"url": replica_url, "engine": "emulator"}]}],
           "health": {"interval_s": 0.5}, **extra}
    path = folder / "gw.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _wait_for(service: Service, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = service.log_text()
        if text in log:
            return log
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in the log:\n{service.log_text()}")


def test_a_replica_that_never_answered_is_not_up_yet_then_up(tmp_path: Path) -> None:
    port = free_port()
    gw = start_gateway(_config(tmp_path, f"http://127.0.0.1:{port}"), log_dir=tmp_path)
    try:
        log = _wait_for(gw, "not up yet")
        assert "ejected" not in log
        emu = start_emulator("--time-scale", "0", "--model", MODEL, "--gpu", "L4", port=port, log_dir=tmp_path)
        try:
            log = _wait_for(gw, f"replica http://127.0.0.1:{port} (pool p) is up")
            assert "ejected" not in log and "is back" not in log
        finally:
            emu.stop()
        log = _wait_for(gw, "ejected")  # it answered once: now its loss is an ejection
    finally:
        gw.stop()


def test_public_metrics_naming_tenants_are_warned_about_at_start(tmp_path: Path) -> None:
    emu = start_emulator("--time-scale", "0", "--model", MODEL, "--gpu", "L4", log_dir=tmp_path)
    try:
        public = start_gateway(_config(tmp_path, emu.url), log_dir=tmp_path)
        try:
            _wait_for(public, "/metrics is public on the main port and names every tenant")
        finally:
            public.stop()
        (tmp_path / "closed").mkdir()
        closed = start_gateway(_config(tmp_path / "closed", emu.url, metrics={"token_sha256": hash_key("m")}),
                               log_dir=tmp_path / "closed")
        try:
            log = _wait_for(closed, "tiers:")
            assert "/metrics is public" not in log
        finally:
            closed.stop()
    finally:
        emu.stop()
