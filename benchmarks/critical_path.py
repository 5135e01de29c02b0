#!/usr/bin/env python3
"""Where one connection's request spends its time, hop by hop: turbogate and Python's floor proxy
(benchmarks/floor_proxy.py) side by side in one run, in front of the same neutral stub; ONE JSON
object.

Each proxy runs with timestamps (``perf_counter_ns``) taken where a request changes hands, by
wrapping five of its methods in the child process; its code is not changed.  Per request:

- ``own_request_us``: the client's bytes arrive → the upstream write begins (the proxy's own
  work: for turbogate the HTTP server, the edge's checks, the flow's open and arrive, L1 and L2);
- ``upstream_write_us``: the upstream ``write()`` (a loopback send that wakes the stub);
- ``upstream_wait_us``: the write returned → the answer's bytes arrive (the stub's work, the
  wake-ups both ways, and whatever the proxy still ran before it slept);
- ``own_answer_us``: the answer arrives → the client write begins (turbogate: parse, usage,
  the flow's ``finished``, the tier tag, the usage record made durable);
- ``client_write_us``: the client ``write()`` (turbogate: the lean cycle's ``send_whole``, which
  also builds the response head);
- ``resident_us``: all of the above, the request's whole stay in the proxy.

p50 and p99 of each, with the run's own p50/p99 latency (from the client, in another process) and
the stub's direct figures for reference.  Each wrapped call adds about a microsecond (turbogate
has 5 wrapped calls a request, the floor 4), so the figures sit a little above an unwrapped
run's.  The question it answers (issue 15): is a one-connection request's added latency the
proxy's own code, or the machine's hand-overs — and does the proxy's own code ever stall?

    python benchmarks/critical_path.py [--seconds 3] [--store sqlite|memory] [--floor-work 0,0 60,45 118,91]

``--floor-work`` adds *calibrated floors*: the floor proxy again, with that many µs of busy
interpreter work before each forward (request side, answer side; floor_proxy.py ``--work-us``).
Their added p50s draw what a proxy's own work costs a one-connection client on this machine once
the longer round trip's hand-overs are counted, so the added latency turbogate would have with
less own work can be read off a measured curve rather than guessed.  ``summary`` gives, per path,
the added p50 over the stub, the own work at p50, and the rest (the hand-overs' excess).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common  # what the gateway benchmarks share (benchmarks/common.py)
from floor_proxy import parse_work
from openai_stub import start_listening, start_stub
from turbogate.procs import free_port, machine_facts, pin_process, wait_healthy
from turbogate.results.percentile import percentile

#: (segment, from mark, to mark): a mark is a wrapped method's tag, "_end" when it returned.
SEGMENTS = [
    ("own_request_us", "in", "up"),
    ("upstream_write_us", "up", "up_end"),
    ("upstream_wait_us", "up_end", "answer"),
    ("own_answer_us", "answer", "out"),
    ("client_write_us", "out", "out_end"),
    ("resident_us", "in", "out_end"),
]


def _instrument(marks: dict[str, tuple[type, str]], out: str) -> None:
    """In the child: wrap each ``(class, method)`` to note its start and end; SIGUSR2 writes the
    notes so far to ``out`` and starts afresh."""
    notes: list[tuple[str, int]] = []
    now = time.perf_counter_ns

    def wrap(cls: type, name: str, tag: str) -> None:
        original: Callable[..., Any] = getattr(cls, name)

        def timed(self: object, *args: object, **kwargs: object) -> object:
            notes.append((tag, now()))
            try:
                return original(self, *args, **kwargs)
            finally:
                notes.append((tag + "_end", now()))
        setattr(cls, name, timed)

    for tag, (cls, name) in marks.items():
        wrap(cls, name, tag)

    def dump(*_: object) -> None:
        partial = Path(out + ".partial")  # renamed when whole: the parent never reads half a file
        partial.write_text(json.dumps(notes))
        notes.clear()
        os.replace(partial, out)
    signal.signal(signal.SIGUSR2, dump)


def child_gateway(out: str, argv: list[str]) -> None:
    from turbogate import build, httpclient
    if build() != "pure Python":  # a compiled class's methods cannot be replaced
        sys.exit("critical_path.py times hops by wrapping the gateway's methods, which a compiled build "
                 "(TURBOGATE_COMPILE=1) does not allow: run it on a pure Python install")
    from turbogate.cli import main
    from turbogate.gateway import cycle, guard
    _instrument({"in": (guard.GuardedHttpToolsProtocol, "data_received"), "up": (httpclient.UpstreamPool, "_send"),
                 "answer": (httpclient._Conn, "data_received"), "out": (cycle.LeanCycle, "send_whole")}, out)
    sys.argv = ["turbogate", *argv]
    main()


def child_floor(out: str, argv: list[str]) -> None:
    import floor_proxy as fp
    _instrument({"in": (fp._Client, "data_received"), "up": (fp._Client, "_forward"),
                 "answer": (fp._Upstream, "data_received"), "out": (fp._Client, "answer")}, out)
    sys.argv = ["floor_proxy", *argv]
    fp.main()


def segments(notes: list[tuple[str, int]]) -> dict[str, dict[str, float]]:
    """Per segment p50/p99 in µs over the requests in ``notes`` (one connection: in order)."""
    requests: list[dict[str, int]] = []
    current: dict[str, int] = {}
    for tag, t in notes:
        if tag == "in" and "out_end" in current:  # the next request's first bytes
            requests.append(current)
            current = {}
        if tag.endswith("_end") or tag not in current:  # a mark's first start, its last end
            current[tag] = t
    out: dict[str, dict[str, float]] = {}
    for name, start, end in SEGMENTS:
        values = sorted((r[end] - r[start]) / 1e3 for r in requests if start in r and end in r)
        if values:
            out[name] = {"p50": round(statistics.median(values), 1), "p99": round(percentile(values, 99), 1),
                         "n": len(values)}
    return out


def summary(paths: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | bool]]:
    """Per proxy: its added p50 over the stub alone, its own work at p50 (both sides), the rest of
    the added p50, which is what its hand-overs cost beyond the stub's own (all ms), and its p99
    against issue 15's one-connection limit (2 × the stub's direct p99 + 0.5 ms)."""
    direct = float(paths["stub_direct"]["run"]["p50_ms"])
    limit = 2 * float(paths["stub_direct"]["run"]["p99_ms"]) + 0.5
    out: dict[str, dict[str, float | bool]] = {}
    for name, path in paths.items():
        if "segments_us" not in path:
            continue
        added = float(path["run"]["p50_ms"]) - direct
        own = (path["segments_us"]["own_request_us"]["p50"] + path["segments_us"]["own_answer_us"]["p50"]) / 1e3
        p99 = float(path["run"]["p99_ms"])
        out[name] = {"added_p50_ms": round(added, 3), "own_work_p50_ms": round(own, 3),
                     "handover_excess_ms": round(added - own, 3), "p99_ms": p99, "p99_limit_ms": round(limit, 3),
                     "p99_holds": p99 <= limit}
    return out


def measure(proc: subprocess.Popen[bytes], url: str, notes_file: Path, seconds: float) -> dict[str, object]:
    common.fixed_run(url, 1, 1.0, False)  # warm-up
    proc.send_signal(signal.SIGUSR2)  # drop the warm-up's notes
    run = common.fixed_run(url, 1, seconds, False, proc.pid)
    notes_file.unlink(missing_ok=True)
    proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not notes_file.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no timestamps came back in {notes_file}")
        time.sleep(0.05)
    return {"run": run, "segments_us": segments(json.loads(notes_file.read_text()))}


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] in ("--child-gateway", "--child-floor"):
        (child_gateway if sys.argv[1] == "--child-gateway" else child_floor)(sys.argv[2], sys.argv[3:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each path's one-connection run")
    ap.add_argument("--store", choices=("sqlite", "memory"), default="sqlite",
                    help="the gateway's store (sqlite: the default config's)")
    ap.add_argument("--floor-work", nargs="*", type=parse_work, default=[(0.0, 0.0)], metavar="REQUEST,ANSWER",
                    help="run the floor once per value, with that many µs of busy work before each forward, "
                         "request side and answer side (default: 0,0 only)")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    stub_cpus, proxy_cpus = ({cpus[0]}, {cpus[1]}) if len(cpus) >= 2 else (None, None)
    tmp = Path(tempfile.mkdtemp(prefix="tg-critical-"))
    stub, stub_url = start_stub(stub_cpus)
    children: list[subprocess.Popen[bytes]] = [stub]
    try:
        cfg = tmp / "gateway.yaml"
        common.write_config(cfg, [stub_url], engine="openai")
        if args.store == "memory":
            cfg.write_text(cfg.read_text() + "store: {kind: memory}\n")
        port = free_port()
        gateway = subprocess.Popen(
            [sys.executable, __file__, "--child-gateway", str(tmp / "gateway.json"), "serve", "--config", str(cfg),
             "--workers", "1", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        children.append(gateway)
        gateway_url = f"http://127.0.0.1:{port}"
        wait_healthy(gateway_url, gateway, timeout=60)
        if proxy_cpus:
            pin_process(gateway.pid, proxy_cpus)  # every thread: the store's writer too
        result = {"turbogate": measure(gateway, gateway_url, tmp / "gateway.json", args.seconds)}
        for request_us, answer_us in args.floor_work:
            name = "python_floor" if request_us == answer_us == 0 else f"python_floor_work_{request_us:g}_{answer_us:g}"
            notes = tmp / f"{name}.json"
            floor, floor_url = start_listening(
                Path(__file__).resolve(), ["--child-floor", str(notes), "--upstream", stub_url,
                                           "--work-us", f"{request_us},{answer_us}"], "the floor proxy", proxy_cpus)
            children.append(floor)
            result[name] = measure(floor, floor_url, notes, args.seconds)
            floor.kill()
        result["stub_direct"] = {"run": common.fixed_run(stub_url, 1, args.seconds, False, stub.pid)}
    finally:
        for child in children:
            child.kill()
            child.wait()
    print(json.dumps({"paths": result, "summary": summary(result), "store": args.store, "seconds": args.seconds,
                      "cpus": len(cpus), "load_average_1m": round(os.getloadavg()[0], 2),
                      "machine": machine_facts()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
