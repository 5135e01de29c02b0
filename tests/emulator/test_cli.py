"""``turbogate emulate`` refuses bad options with a clear message and exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--gpu", "no-such-gpu"], "unknown GPU"),
        (["--model", "llama-3.1-70b", "--gpu", "L4"], "raise --tp"),
        (["--tokenizer", "/no/such/tokenizer.json"], "tokenizer"),
        (["--max-model-len", "10000", "--num-gpu-blocks", "4"], "--max-model-len"),
    ],
)
def test_bad_options_exit_2_with_a_message(options: list[str], expected: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "turbogate", "emulate", *options, "--port", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
