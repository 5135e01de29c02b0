#!/usr/bin/env bash
# Build turbogate with its request path compiled by mypyc (TURBOGATE_COMPILE=1, setup.py) and
# install it into DIR, beside the checkout's own pure Python install, for side-by-side runs:
#   bash scripts/build_compiled.sh /tmp/turbogate-compiled
#   PYTHONPATH=/tmp/turbogate-compiled .venv/bin/turbogate --version    # ... (compiled)
#   .venv/bin/python benchmarks/gateway_overhead.py --compiled /tmp/turbogate-compiled
# It uses this environment's setuptools and mypy (no download) and a C compiler; about 3 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/build_compiled.sh DIR}
python=${PYTHON:-.venv/bin/python}
rm -rf build  # a build folder from an earlier build would be reused, stale
TURBOGATE_COMPILE=1 "$python" -m pip install -q --no-deps --no-build-isolation --upgrade --target "$target" .
