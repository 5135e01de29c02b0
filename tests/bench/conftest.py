"""Fixtures shared by the bench tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from turbogate.procs import Service, start_emulator


@pytest.fixture(scope="module")
def fast_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """An instant emulator (--time-scale 0), shared by a module's quick CLI tests."""
    svc = start_emulator("--time-scale", "0", "--model", "llama-3.2-1b", "--gpu", "L4",
                         log_dir=tmp_path_factory.mktemp("logs"))
    yield svc
    svc.stop()
