"""Shared fixtures: real services on 127.0.0.1 ephemeral ports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from turbogate.procs import Service, start_emulator

# Property tests judge results, not speed: on a busy 2-core machine one example can take longer
# than Hypothesis's default 200 ms deadline, which would fail a correct test.
settings.register_profile("turbogate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("turbogate")


def pytest_configure(config: pytest.Config) -> None:
    """``TURBOGATE_EXPECT_BUILD=compiled`` (tests/compiled runs the suite so against a compiled
    build): stop at once if the turbogate imported is another build, so no test passes by
    running the pure Python one."""
    expected = os.environ.get("TURBOGATE_EXPECT_BUILD")
    if expected:
        import turbogate

        if turbogate.build() != expected:
            raise pytest.UsageError(f"expected a {expected} turbogate, imported {turbogate.build()} "
                                    f"from {turbogate.__file__}")


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
