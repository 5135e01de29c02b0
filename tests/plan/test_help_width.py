"""`--help` to a pipe (CI logs, `| less`, a file) shows defaults whole, not cut at Rich's 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _help(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH", "LINES")}
    done = subprocess.run([sys.executable, "-m", "turbogate", *args, "--help"], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    return done.stdout


@pytest.mark.parametrize("command", [("bench",), ("serve",), ("plan", "matrix"), ("emulate",), ("demo",)])
def test_piped_help_is_not_cut(command: tuple[str, ...]) -> None:
    out = _help(*command)
    assert "Usage:" in out
    assert "…" not in out, out  # Rich marks a cut cell with an ellipsis


def test_piped_help_shows_a_long_default_whole() -> None:
    assert "[default: http://127.0.0.1:8080]" in _help("bench")


def test_turbo_bench_script_help_is_not_cut() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH", "LINES")}
    code = "from turbogate.bench.cli import turbo_bench_main; turbo_bench_main()"
    done = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert "Usage: turbo-bench" in done.stdout
    assert "…" not in done.stdout and "[default: http://127.0.0.1:8080]" in done.stdout
