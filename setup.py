"""The build's one dynamic part: with ``TURBOGATE_COMPILE=1``, the modules a request passes
through are compiled to C extensions with mypyc; everything else is in pyproject.toml.

A compiled install runs the same code: the ``.py`` files ship beside the extensions, and the
extensions are what Python imports.  ``turbogate --version`` says which build it is.  Only a
wheel's build compiles (build_support/turbogate_build.py): never an editable install.
See docs/install.md ("A compiled build") for how much it saves and how to build one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup

sys.path.insert(0, str(Path(__file__).resolve().parent / "build_support"))
from turbogate_build import compile_wanted  # the one reading of TURBOGATE_COMPILE

#: The request's path in the gateway, and the simulator's and emulator's loop: the pure core
#: (``sched/``, typed strictly), the engine loop (``engine/``), the simulator's event loop, the
#: upstream client and the gateway modules that run on every request, the HTTP protocol and
#: request cycle among them (``gateway/guard.py``, ``gateway/cycle.py``: compiled classes over
#: uvicorn's Python ones, so every attribute they read from uvicorn must hold the type uvicorn
#: declares), the routes, the request path's metrics and the usage journal and writer.  Left as
#: Python: ``asgi.py``'s ``AsgiApp`` is subclassed by Python classes (``GatewayApp``'s
#: ``handle_http`` is the compiled ``gateway/routes.py``'s);
#: ``sim/fleet.py`` uses pydantic, which mypyc's C output does not build against here; the rest
#: is set-up and I/O.
COMPILED = [
    "src/turbogate/sched",
    "src/turbogate/engine",
    "src/turbogate/httpclient.py",
    *(f"src/turbogate/gateway/{name}.py" for name in (
        "busypoll", "cycle", "driver", "edge", "guard", "marking", "metering", "metrics", "proxy", "routes",
        "runtime", "serve", "sse", "usage_scan", "watch")),
    *(f"src/turbogate/store/{name}.py" for name in ("journal", "records", "writer")),
    *(f"src/turbogate/sim/{name}.py" for name in ("baselines", "core", "regions", "replica", "requests", "run")),
]


def _extensions() -> list[object]:
    if not compile_wanted():
        return []
    from mypyc.build import mypycify  # a build requirement only when compiling (build_support/)

    return list(mypycify(COMPILED, opt_level="3", group_name="turbogate"))


setup(ext_modules=_extensions())
