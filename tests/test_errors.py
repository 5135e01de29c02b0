"""Every exception class turbogate defines derives from TurbogateError, so one ``except`` and the
command line's one-line error (clierrors.py) cover all of them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import turbogate
from turbogate.errors import TurbogateError


def test_every_exception_class_derives_from_turbogate_error() -> None:
    outside: list[str] = []
    imported = 0
    for info in pkgutil.walk_packages(turbogate.__path__, "turbogate."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra not installed here (its module is checked where it is)
            continue
        imported += 1
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, BaseException) \
                    and not issubclass(cls, TurbogateError):
                outside.append(f"{info.name}.{name}")
    assert imported > 100
    assert outside == []


def test_the_request_error_does_not_share_pydantics_name() -> None:
    import turbogate.errors as errors

    assert not hasattr(errors, "ValidationError")
    assert issubclass(errors.InvalidRequest, TurbogateError)
