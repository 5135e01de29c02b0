"""Start turbogate services as real child processes on free 127.0.0.1 ports.

Used by the tests, the benchmarks and ``turbogate demo``: one way to start an emulator or a
gateway, wait until it answers ``/health``, and stop it cleanly.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType


def free_port(host: str = "127.0.0.1") -> int:
    """An ephemeral port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    """A running child process serving HTTP at ``url``."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path | None = None
    _log_file: object = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None

    def kill(self) -> None:
        """Hard kill, as a crashed replica would die."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_text(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> Service:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


_CPU_KINDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

#: Most of the machine's CPU time the hypervisor may take over a benchmark run (``steal`` in
#: /proc/stat over the run's wall time and CPUs) for its latency figures to count as a quiet
#: machine's.  A neighbouring virtual machine's work shows in no process here, only as steal:
#: one-core streaming bench trials read a p99 dispatch lag of 0.28-0.34 ms at 0.004-0.005 steal,
#: 1.7-2.4 ms at 0.018-0.021 (benchmarks/bench_capacity.py; docs/gateway.md, "Tenth pass").
QUIET_STEAL = 0.01


def machine_cpu_seconds() -> dict[str, float] | None:
    """The whole machine's CPU seconds so far, by kind (``user``, ``nice``, ``system``, ``idle``,
    ``iowait``, ``irq``, ``softirq``, ``steal``: Linux ``/proc/stat``'s first line, all CPUs
    together); None where it cannot be read.  Benchmarks take the difference over a run."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        values = [int(x) for x in fields[: len(_CPU_KINDS)]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    values += [0] * (len(_CPU_KINDS) - len(values))
    return {kind: v / tick for kind, v in zip(_CPU_KINDS, values, strict=True)}


def steal_seconds() -> float:
    """CPU seconds the hypervisor has taken from this virtual machine so far, all CPUs together
    (0 where /proc/stat cannot be read)."""
    t = machine_cpu_seconds()
    return t["steal"] if t is not None else 0.0


def steal_mark() -> tuple[float, float]:
    """Where a run starts, for :func:`steal_share_since`."""
    return steal_seconds(), time.monotonic()


def steal_share_since(mark: tuple[float, float]) -> float:
    """The share of the machine's CPU time (its wall time × CPUs) the hypervisor stole since
    ``mark``, to hold against ``QUIET_STEAL``."""
    steal0, t0 = mark
    wall = max(time.monotonic() - t0, 1e-9)
    return round((steal_seconds() - steal0) / (wall * (os.cpu_count() or 1)), 3)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def machine_facts() -> dict[str, object]:
    """What decides how dear an idle core's wake-up is, for a benchmark's JSON: whether this is a
    virtual machine, the cpuidle driver and governor, the guest halt-polling window, and the
    kernel command line's idle-related settings (None or empty where unknown, e.g. not Linux).
    One-connection latency moves with these far more than with the code (docs/gateway.md, ninth
    pass)."""
    cpuinfo = _read("/proc/cpuinfo")
    poll_ns = _read("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    cmdline = (_read("/proc/cmdline") or "").split(" -- ", 1)[0].split()
    return {
        "kernel": os.uname().release if hasattr(os, "uname") else None,
        "virtual_machine": None if cpuinfo is None else " hypervisor" in cpuinfo,
        "cpuidle_driver": _read("/sys/devices/system/cpu/cpuidle/current_driver"),
        "cpuidle_governor": _read("/sys/devices/system/cpu/cpuidle/current_governor"),
        "guest_halt_poll_ns": int(poll_ns) if poll_ns is not None and poll_ns.isdigit() else None,
        "kernel_idle_settings": [t for t in cmdline if t.startswith(("haltpoll", "cpuidle", "idle=", "nested",
                                                                     "nohz", "intel_idle", "processor."))],
    }


def pin_process(pid: int, cpus: set[int]) -> bool:
    """Pin every thread of process ``pid`` (0: this one) to ``cpus``; threads it starts later
    inherit it from the thread that starts them.  False where nothing could be pinned (the process
    is gone, or the OS does not allow it: not Linux).  Linux's ``sched_setaffinity(pid)`` pins one
    thread only, so a process pinned that way after start-up keeps, say, a store's writer thread
    free to run on a benchmark's other core."""
    try:
        threads = [int(t.name) for t in Path(f"/proc/{pid or os.getpid()}/task").iterdir()]
    except (OSError, ValueError):
        threads = [pid]
    pinned = 0
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
            pinned += 1
        except ProcessLookupError:  # the thread ended meanwhile
            continue
        except (AttributeError, OSError):
            return False
    return pinned > 0


def wait_healthy(url: str, process: subprocess.Popen[bytes] | None = None, timeout: float = 30.0,
                 path: str = "/health") -> None:
    """Poll ``url + path`` until it answers 200, the process dies, or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with code {process.returncode} before {url} was healthy")
        try:
            with urllib.request.urlopen(url + path, timeout=1.0) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            last_error = str(exc)
        time.sleep(0.05)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f}s ({last_error})")


def start_service(
    name: str,
    args: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    log_dir: Path | None = None,
    env: dict[str, str] | None = None,
    wait: bool = True,
    timeout: float = 30.0,
) -> Service:
    """Run ``python -m turbogate <args> --host H --port P`` and wait for ``/health``."""
    port = port or free_port(host)
    cmd = [sys.executable, "-m", "turbogate", *args, "--host", host, "--port", str(port)]
    log_path: Path | None = None
    log_file = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}-{port}.log"
        log_file = log_path.open("wb")
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen(
        cmd,
        stdout=log_file or subprocess.DEVNULL,
        stderr=subprocess.STDOUT if log_file else subprocess.DEVNULL,
        env=full_env,
    )
    service = Service(name=name, url=f"http://{host}:{port}", process=process, log_path=log_path)
    service._log_file = log_file
    if wait:
        try:
            wait_healthy(service.url, process, timeout=timeout)
        except Exception:
            service.stop()
            raise
    return service


def start_emulator(*options: str, log_dir: Path | None = None, port: int | None = None,
                   wait: bool = True, timeout: float = 30.0) -> Service:
    """Start ``turbogate emulate`` with extra CLI ``options`` (e.g. ``"--time-scale", "0"``)."""
    return start_service("emulator", ["emulate", *options], log_dir=log_dir, port=port, wait=wait,
                         timeout=timeout)


def start_gateway(config_path: Path, *options: str, log_dir: Path | None = None,
                  port: int | None = None, timeout: float = 30.0) -> Service:
    """Start ``turbogate serve --config CONFIG`` with extra CLI ``options``."""
    return start_service("gateway", ["serve", "--config", str(config_path), *options],
                         log_dir=log_dir, port=port, timeout=timeout)
