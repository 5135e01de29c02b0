"""The README's tour, run as written against real processes, so the README cannot drift from the code.

The block between ``<!-- tour: ... -->`` and ``<!-- /tour -->`` in README.md runs in one ``bash``
(with ``set -e``), in a scratch folder that holds what a fresh clone has beside it: ``.venv`` (the
environment running this test) and ``examples/local-gateway.yaml``.  Two substitutions only, both
stated in the README's marker: the fixed ports 8001/8002/8080 become free ones (in the commands and
in the config copy: other tests or a developer's own tour may hold the fixed ones), and the bench's
``--duration 120`` becomes ``--duration 30``.

Two real-speed emulators, the gateway and the bench on one small machine: the tour's bench line may
measure this machine rather than the fleet (``plan capacity`` puts the two replicas' knee far above
the ramp's 60 req/s).  Whatever the machine does, a run it bounded recommends nothing for the fleet.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import openpyxl
import pytest

from turbogate.procs import free_port

REPO = Path(__file__).resolve().parents[1]
TOUR = re.compile(r"<!-- tour:[^>]*-->\s*```bash\n(?P<block>.*?)```\s*<!-- /tour -->", re.S)
FIXED_PORTS = ("8001", "8002", "8080")
BENCH_S = 30.0  # the bench line's --duration here: ten 3 s steps, long enough for the machine's signals
FLEET_ACTIONS = ("add replicas", "sell it above", "switch Turbo off")


def tour_block() -> str:
    m = TOUR.search((REPO / "README.md").read_text())
    assert m is not None, "README.md lost its <!-- tour --> block"
    return m.group("block")


def _stop_group(pgid: int) -> None:
    """End what the tour left running (its own process group), politely first."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def test_the_tour_block_is_what_the_test_expects() -> None:
    block = tour_block()
    assert "--duration 120" in block  # the one duration the test shortens
    assert "examples/local-gateway.yaml" in block
    assert all(p in block for p in FIXED_PORTS)
    assert not re.search(r"^turbo", block, re.M), "call .venv/bin/turbogate: a fresh clone has no activated venv"
    config = (REPO / "examples" / "local-gateway.yaml").read_text()
    assert "127.0.0.1:8001" in config and "127.0.0.1:8002" in config and "port: 8080" in config


def test_readme_tour_runs_as_written(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "turbogate").exists() or not (bin_dir / "turbo-bench").exists():
        pytest.skip(f"turbogate is not installed as a script beside {sys.executable}")
    if shutil.which("curl") is None:
        pytest.skip("the tour uses curl: apt-get install curl")
    ports = {p: str(free_port()) for p in FIXED_PORTS}

    def ported(text: str) -> str:
        return re.sub(r"\b(8001|8002|8080)\b", lambda m: ports[m.group()], text)

    script = ported(tour_block()).replace("--duration 120", f"--duration {BENCH_S:g}")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(bin_dir)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "local-gateway.yaml").write_text(
        ported((REPO / "examples" / "local-gateway.yaml").read_text()))

    log = tmp_path / "tour.log"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)}
    with log.open("w") as out:
        proc = subprocess.Popen(["bash", "-c", "set -e\n" + script], cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=150 + BENCH_S)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            _stop_group(proc.pid)
    text = log.read_text()
    assert rc == 0, f"the README tour failed (rc {rc}):\n{text[-6000:]}"

    # what each step should have left behind
    assert re.search(r'"service_tier"\s*:\s*"turbo"', text), text[-4000:]  # asked "priority", served Turbo
    runs = list((tmp_path / "runs").glob("bench-*/summary.json"))
    assert len(runs) == 1, text[-4000:]
    summary = json.loads(runs[0].read_text())
    machine = summary["config"]["machine"]  # the bench judged the machine at every step
    steps = machine["steps"]
    assert steps and all(s["gateway_cpu"] is not None and s["emulator_behind"] is not None for s in steps), machine
    advice = summary["recommendation"]
    if machine["saturated_first"]:
        assert advice.startswith("No fleet recommendation from this run: bounded by this machine at"), advice
        assert "knee — bounded by this machine at" in text
        assert all(k["value"] is None for k in summary["knees"].values())
    else:
        assert machine["first_bound_rps"] is None or "only past the fleet's knee" in machine["line"], machine
    assert not (machine["saturated_first"] and any(a in advice for a in FLEET_ACTIONS)), advice
    assert "saturation request rate" in text  # plan capacity
    assert re.search(r"^x-turbogate-downgrade: not_entitled", text, re.M | re.I), text[-4000:]  # 200, said why
    assert not (tmp_path / "decision.xlsx").exists()  # the tour writes under runs/ (ignored), not the clone's root
    ws = openpyxl.load_workbook(tmp_path / "runs" / "decision.xlsx", data_only=True)["matrix"]
    headers = [c.value for c in ws[1]]
    assert ws.cell(row=2, column=headers.index("recommendation") + 1).value in text  # the workbook shows it
    assert "Up to what load is Turbo on, capped, off?" in text  # plan matrix without a peak
