"""The compiled build (``TURBOGATE_COMPILE=1``, setup.py): it builds from this tree the way a
wheel does, its request path is C extensions, and the core's, the gateway's and the simulator's
tests pass against it.  A mypyc limit (a field annotation, a subclass, a patched method) shows
here first, not in a user's image."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The tests run against the compiled build: the core, the engine loop, the upstream client, the
#: gateway end to end through the official client, the simulator (a Ray sweep included) and the
#: emulator, all on the compiled modules.
SUITE = ["tests/sched", "tests/engine", "tests/sim", "tests/emulator", "tests/gateway/test_upstream_client.py",
         "tests/gateway/test_api.py", "tests/gateway/test_sse.py", "tests/gateway/test_coalesce.py",
         "tests/gateway/test_shedding.py", "tests/gateway/test_turbo_isolation.py"]

#: The build alone takes about 3 min on 2 cores and more on a busy machine (it passed 300 s once),
#: so the module's limit is its subprocesses' own: the build's 1,200 s, then the suite's 1,500 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200 + 1500)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        if os.environ.get("CI"):
            pytest.fail("no C compiler: the compiled build needs one (apt-get install gcc)")
        pytest.skip("no C compiler for the compiled build")
    target = tmp_path_factory.mktemp("compiled")
    built = subprocess.run(["bash", str(ROOT / "scripts" / "build_compiled.sh"), str(target)],
                           env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True,
                           timeout=1200)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    return target


def _env(target: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(target), "TURBOGATE_EXPECT_BUILD": "compiled"}


def test_the_request_path_is_compiled(compiled: Path) -> None:
    suffixes = [p.name for p in (compiled / "turbogate" / "sched").glob("flow*.so")]
    assert suffixes, "sched/flow was not compiled"
    version = subprocess.run([sys.executable, "-m", "turbogate", "--version"], env=_env(compiled),
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "(compiled)" in version.stdout, version.stdout + version.stderr
    plain = subprocess.run([sys.executable, "-m", "turbogate", "--version"], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
    assert "(pure Python)" in plain.stdout  # the checkout's own install is never compiled


def test_the_suite_passes_against_the_compiled_build(compiled: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *SUITE],
                         env=_env(compiled), cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert re.search(r"\b\d+ passed\b", run.stdout) and " failed" not in run.stdout, run.stdout[-2000:]


def test_the_simulator_predicts_the_same_requests_compiled(compiled: Path) -> None:
    """Every record of a small simulated fleet is the same, field for field, in both builds."""
    def digest(env: dict[str, str]) -> tuple[int, str]:
        run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_speed.py"), "--minutes", "0.2",
                              "--replicas", "4"], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert run.returncode == 0, run.stderr[-3000:]
        out = json.loads(run.stdout)
        return out["requests"], out["records_sha256"]

    pure = digest({k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert pure[0] > 100
    assert digest(_env(compiled)) == pure
