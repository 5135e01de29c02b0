"""``plan profile`` without ``--tiny`` on a machine with no usable GPU: one clear line, exit 2, no file.

The torch path itself needs a CUDA GPU; these tests pin what a user without one is told, with PyTorch
missing and with a PyTorch that sees no CUDA device (a stand-in module, so the test runs anywhere)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from typer.testing import CliRunner

from turbogate.cli import app

runner = CliRunner()


def _profile(out: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["plan", "profile", "--out", str(out)])
    return result.exit_code, result.output


def test_without_pytorch_it_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    code, output = _profile(tmp_path / "gpu.json")
    assert code == 2
    assert "plan profile needs PyTorch: pip install 'turbogate[torch]'" in output
    assert "--tiny" in output
    assert not (tmp_path / "gpu.json").exists()


def test_with_pytorch_but_no_cuda_device_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = ModuleType("torch")
    fake.cuda = SimpleNamespace(is_available=lambda: False)  # type: ignore[attr-defined]
    fake.bfloat16, fake.float16 = "bf16", "fp16"  # type: ignore[attr-defined]
    fake.manual_seed = lambda seed: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)
    code, output = _profile(tmp_path / "gpu.json")
    assert code == 2
    assert "plan profile found no CUDA GPU; use --tiny for the CPU pipeline check" in output
    assert not (tmp_path / "gpu.json").exists()
