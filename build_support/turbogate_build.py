"""turbogate's build backend: setuptools' own, plus mypy as a build requirement when
``TURBOGATE_COMPILE=1`` asks for the request path compiled with mypyc (setup.py, docs/install.md).

setup.py runs for every hook.  Only building a wheel compiles: while any other hook runs
(requirements, metadata, an sdist, an editable install) the extensions are switched off, so no
hook needs mypy before the build has it, and an editable install stays pure Python (an extension
beside the source would hide every later edit).  A plain build needs no mypy at all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the hooks not wrapped below, unchanged)

#: What compiling needs at build time (the installed package needs none of it at run time).
COMPILE_REQUIRES = ["mypy>=1.10"]
_NO_EXTENSIONS = "_TURBOGATE_NO_EXTENSIONS"  # set while a hook other than build_wheel runs


def compile_wanted() -> bool:
    """Whether setup.py should compile now: asked for, and inside a wheel's build."""
    asked = os.environ.get("TURBOGATE_COMPILE", "").strip().lower() in {"1", "true", "yes"}
    return asked and not os.environ.get(_NO_EXTENSIONS)


@contextmanager
def _without_extensions() -> Iterator[None]:
    before = os.environ.get(_NO_EXTENSIONS)
    os.environ[_NO_EXTENSIONS] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_NO_EXTENSIONS, None)
        else:
            os.environ[_NO_EXTENSIONS] = before


def _pure(hook: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        with _without_extensions():
            return hook(*args, **kwargs)
    run.__name__ = hook.__name__
    return run


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    extra = COMPILE_REQUIRES if compile_wanted() else []
    with _without_extensions():
        return [*_setuptools.get_requires_for_build_wheel(config_settings), *extra]


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    if compile_wanted():
        print("turbogate: TURBOGATE_COMPILE is ignored for an editable install", file=sys.stderr)
    with _without_extensions():
        return list(_setuptools.get_requires_for_build_editable(config_settings))


prepare_metadata_for_build_wheel = _pure(_setuptools.prepare_metadata_for_build_wheel)
prepare_metadata_for_build_editable = _pure(_setuptools.prepare_metadata_for_build_editable)
build_editable = _pure(_setuptools.build_editable)
get_requires_for_build_sdist = _pure(_setuptools.get_requires_for_build_sdist)
build_sdist = _pure(_setuptools.build_sdist)
