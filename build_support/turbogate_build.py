"""turbogate's build backend: setuptools' own, plus mypy as a build requirement when
``TURBOGATE_COMPILE=1`` asks for the request path compiled with mypyc (setup.py, docs/install.md).

Only the requirements differ; every hook is setuptools'.  A plain build needs no mypy, so an
ordinary ``pip install`` downloads nothing more.
"""

from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every PEP 517/660 hook, unchanged)

#: What compiling needs at build time (the installed package needs none of it at run time).
COMPILE_REQUIRES = ["mypy>=1.10"]


def compile_wanted() -> bool:
    return os.environ.get("TURBOGATE_COMPILE", "").strip().lower() in {"1", "true", "yes"}


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    extra = COMPILE_REQUIRES if compile_wanted() else []
    return [*_setuptools.get_requires_for_build_wheel(config_settings), *extra]
