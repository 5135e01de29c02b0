"""Connecting to Ray for ``sim --sweep --ray`` and ``bench --workers N --ray`` (the ``ray`` extra)."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from turbogate.errors import ConfigError


def local_cpus() -> int:
    """CPUs this process may use (its affinity where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def connect(address: str, option: str = "--ray") -> tuple[ModuleType, bool]:
    """Import Ray and join the cluster at ``address`` ('auto', 'ray://host:10001', or 'local' for
    an instance of this machine's own).  Returns the module and whether this call started it (then
    the caller shuts it down)."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"{option} needs the 'ray' package: pip install 'turbogate[ray]'") from None
    if ray.is_initialized():
        return ray, False
    kwargs: dict[str, Any] = {"address": address, "ignore_reinit_error": True,
                              "log_to_driver": False}
    if address == "local":
        kwargs.update(num_cpus=local_cpus(), include_dashboard=False)
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"{option} {address}: cannot join the Ray cluster ({exc})") from None
    return ray, True
