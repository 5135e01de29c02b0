#!/usr/bin/env python3
"""Instructions per proxied request, counted (valgrind's callgrind), not timed; ONE JSON object.

CPU time on a shared machine moves by ±15 % from run to run whatever the code does; an
instruction count does not: the same binary, inputs and environment give the same count with
the other cores busy or not.  So a before/after comparison of the gateway's per-request work
that must hold on any machine reads instructions.  For each ``--tree NAME=SRC`` (a folder holding
the ``turbogate`` package; ``git archive COMMIT src | tar -x -C /tmp/old`` gives ``/tmp/old/src``)
a one-worker gateway runs under ``valgrind --tool=callgrind`` in front of the neutral stub
(benchmarks/openai_stub.py, not under valgrind), is warmed up with ``--requests`` sequential
small chats on one keep-alive connection, then counted (``callgrind_control -i on``) while it
serves as many again (valgrind instruments nothing before that: the start is quick); start-up,
warm-up and shutdown are not counted.  Everything the process does meanwhile counts: the event
loop, uvicorn, the app, the core, the usage journal.  Python's hash seed is fixed
(PYTHONHASHSEED=0).  The store is the memory store unless ``--store sqlite``: SQLite's batches
are written every 20 ms of wall time, so under valgrind's ~50× slowdown each holds a few records
instead of hundreds and its fixed cost swamps the count (the store's own cost per record is
measured in benchmarks/store_overhead.py).  Two runs of one tree agree within about 1 %.

    python benchmarks/gateway_instructions.py --tree before=/tmp/old/src --tree after=src [--requests 300]

Needs ``valgrind``; about 15 s a tree at the default ``--requests``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # what the gateway benchmarks share (benchmarks/common.py)
from openai_stub import start_stub
from turbogate.procs import free_port, wait_healthy

_TOTALS = re.compile(rb"^totals: (\d+)", re.MULTILINE)


def _requests(port: int, n: int) -> None:
    """``n`` small chats, one after another on one keep-alive connection, each request written
    whole in one ``send()`` as wrk and the usual HTTP clients do (http.client writes the headers
    and the body apart, so whether the body is there when the gateway reads the headers would
    depend on timing, and so would the count)."""
    body = json.dumps(common.BODY).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Authorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (common.KEY.encode(), len(body), body))
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffered = b""
        for _ in range(n):
            sock.sendall(request)
            while b"\r\n\r\n" not in buffered:
                buffered += _recv(sock)
            head, _, buffered = buffered.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
            while len(buffered) < length:
                buffered += _recv(sock)
            buffered = buffered[length:]
            if status != 200:
                raise RuntimeError(f"the gateway answered {status}")


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    if not data:
        raise RuntimeError("the gateway closed the connection")
    return data


def count(src: Path, config: Path, n: int, out: Path) -> int:
    """Instructions one gateway process spends on ``n`` requests after ``n`` of warm-up."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--instr-atstart=no",
         sys.executable, "-m", "turbogate", "serve", "--config", str(config), "--workers", "1",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=600)
        _requests(port, n)  # warm-up: connections, caches, lazily built state
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
        _requests(port, n)
        subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    match = _TOTALS.search(out.read_bytes())
    if match is None:
        raise RuntimeError(f"no instruction total in {out}")
    return int(match.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=SRC",
                    help="a name and the source folder its gateway runs from (PYTHONPATH); repeat")
    ap.add_argument("--requests", type=int, default=300, help="requests counted (after as many of warm-up)")
    ap.add_argument("--store", choices=("memory", "sqlite"), default="memory", help="the gateway's store (see above)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not installed (apt-get install valgrind)")
    trees = {}
    for spec in args.tree:
        name, _, src = spec.partition("=")
        if not (Path(src) / "turbogate").is_dir():
            ap.error(f"--tree {spec!r}: expected NAME=SRC with SRC/turbogate a package folder")
        trees[name] = Path(src).resolve()
    stub, url = start_stub()
    tmp = Path(tempfile.mkdtemp(prefix="tg-instr-"))
    out: dict[str, object] = {}
    try:
        for name, src in trees.items():
            cfg = tmp / f"{name}.yaml"
            # The event loop's idle poll off (gateway/busypoll.py): its turns while the loop waits are
            # not a request's work, and under callgrind every wait is long.  (A tree from before it
            # has no such setting, and no poll.)
            knows_poll = "idle_poll_max_us" in (src / "turbogate" / "config.py").read_text()
            poll_off = {"idle_poll_max_us": 0} if knows_poll else {}
            common.write_config(cfg, [url], engine="openai", listen=poll_off)
            if args.store == "memory":
                cfg.write_text(cfg.read_text() + "store: {kind: memory}\n")
            t0 = time.monotonic()
            total = count(src, cfg, args.requests, tmp / f"{name}.callgrind")
            out[name] = {"instructions_per_request": round(total / args.requests), "total": total,
                         "wall_s": round(time.monotonic() - t0, 1)}
    finally:
        stub.kill()
        stub.wait()
    print(json.dumps({"trees": out, "requests": args.requests, "store": args.store,
                      "python": sys.version.split()[0], "tool": "valgrind --tool=callgrind"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
