"""Deploy test helpers: find the real tools (hadolint, kubectl, promtool, prometheus).

A missing tool skips its tests with the reason on a developer's machine; under CI (``CI`` set,
where .ci/run installs them all) it fails instead, so a green CI never hides an unchecked file.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

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
