"""turbogate.procs.pin_process pins every thread of a process, not only the one whose id is the
process's: the benchmarks pin a gateway after start-up, when its store's writer thread is already
running, and ``os.sched_setaffinity(pid)`` alone would leave that thread free to run on the
core meant for the engine stub."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from turbogate.procs import (
    machine_cpu_seconds,
    machine_facts,
    pin_process,
    steal_mark,
    steal_seconds,
    steal_share_since,
)

# A child that starts a second thread, says so, and waits for stdin to close.
_CHILD = """
import sys, threading
started = threading.Event()
threading.Thread(target=lambda: (started.set(), sys.stdin.read()), daemon=True).start()
started.wait()
print("ready", flush=True)
sys.stdin.read()
"""


_LINUX = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not Path("/proc/self/task").is_dir(),
                            reason="thread affinity is Linux's")


@_LINUX
def test_every_thread_of_the_process_is_pinned() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    target = {cpus[-1]}
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        threads = [int(t.name) for t in Path(f"/proc/{child.pid}/task").iterdir()]
        assert len(threads) >= 2, threads
        assert pin_process(child.pid, target)
        for tid in threads:
            assert os.sched_getaffinity(tid) == target, (tid, os.sched_getaffinity(tid))
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


@_LINUX
def test_a_process_that_is_gone_is_reported() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    assert pin_process(child.pid, {sorted(os.sched_getaffinity(0))[0]}) is False


def test_machine_facts_name_what_they_know_and_none_for_the_rest() -> None:
    facts = machine_facts()
    assert set(facts) == {"kernel", "virtual_machine", "cpuidle_driver", "cpuidle_governor", "guest_halt_poll_ns",
                          "kernel_idle_settings"}
    assert facts["virtual_machine"] in (True, False, None)
    assert facts["guest_halt_poll_ns"] is None or isinstance(facts["guest_halt_poll_ns"], int)
    assert isinstance(facts["kernel_idle_settings"], list)
    cmdline = Path("/proc/cmdline")
    if cmdline.exists():  # each setting named is one of the kernel's own, word for word
        words = cmdline.read_text().split()
        assert all(word in words for word in facts["kernel_idle_settings"]), facts


def test_steal_is_the_machine_counters_steal_and_never_goes_back() -> None:
    first = steal_seconds()
    counters = machine_cpu_seconds()
    later = steal_seconds()
    assert 0.0 <= first <= later
    if counters is not None:  # Linux: the same counter /proc/stat gives
        assert first <= counters["steal"] <= later
    mark = steal_mark()
    assert 0.0 <= steal_share_since(mark) <= 1.0  # a share of the machine's CPU time
