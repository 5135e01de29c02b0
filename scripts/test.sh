#!/usr/bin/env bash
# Set up a virtual environment, then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/pytest "$@"
