"""Shared fixtures: real services on 127.0.0.1 ephemeral ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from turbogate.procs import Service, start_emulator


@pytest.fixture
def emulator_factory(tmp_path: Path) -> Iterator[object]:
    """Call ``emulator_factory("--time-scale", "0", ...)`` to start emulators; all stop at teardown."""
    started: list[Service] = []

    def make(*options: str, wait: bool = True) -> Service:
        svc = start_emulator(*options, log_dir=tmp_path / "logs", wait=wait)
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()
