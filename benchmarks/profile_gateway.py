#!/usr/bin/env python3
"""A flame graph of one gateway worker under load (py-spy), and the load's figures as ONE JSON object.

Starts the neutral OpenAI stub (benchmarks/openai_stub.py) and a one-worker gateway in front of
it (the stub on one core, the gateway on another where there are two), warms up, then records
the gateway process with ``py-spy record --nonblocking`` while ``--conns`` keep-alive connections
send small chats back to back for ``--seconds`` (benchmarks/common.py's fixed-connection client).
``--format raw`` writes collapsed stacks (one line per stack and its sample count) instead of an
SVG, for a text summary.  Needs ``py-spy`` (the dev extra) and the right to trace the process.

    python benchmarks/profile_gateway.py --out docs/profiles/gateway-after.svg [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # what the gateway benchmarks share (benchmarks/common.py)
from openai_stub import start_stub
from turbogate.procs import pin_process, start_gateway


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="Where to write the flame graph (or raw stacks).")
    ap.add_argument("--format", choices=("flamegraph", "raw"), default="flamegraph")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true",
                    help="C frames too (py-spy --native): what each Python frame spends in C, system calls included")
    args = ap.parse_args()
    spy_bin = shutil.which("py-spy")
    if spy_bin is None:
        ap.error("py-spy is not installed (pip install py-spy, or the dev extra)")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    stub, url = start_stub({cpus[0]} if len(cpus) >= 2 else None)
    tmp = Path(tempfile.mkdtemp(prefix="tg-profile-"))
    cfg = tmp / "gateway.yaml"
    common.write_config(cfg, [url], engine="openai")
    gateway = start_gateway(cfg, "--workers", "1", log_dir=tmp)
    try:
        if len(cpus) >= 2:
            pin_process(gateway.process.pid, {cpus[1]})
        common.fixed_run(gateway.url, args.conns, 1.0, False)  # warm-up
        # --native needs the process stopped while its C stack is read (py-spy cannot do it nonblocking).
        mode = ["--native"] if args.native else ["--nonblocking"]
        spy = subprocess.Popen([spy_bin, "record", *mode, "-r", str(args.rate), "-f", args.format,
                                "-o", str(args.out), "--pid", str(gateway.process.pid),
                                "-d", str(int(args.seconds) + 1)], stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # py-spy attached before the load starts
        load = common.fixed_run(gateway.url, args.conns, args.seconds, False, gateway.process.pid)
        spy.wait(timeout=args.seconds + 30)
    finally:
        gateway.stop()
        stub.kill()
        stub.wait()
    print(json.dumps({"out": str(args.out), "format": args.format, "conns": args.conns, "seconds": args.seconds,
                      "load": load, "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
