#!/usr/bin/env python3
"""Gateway CPU per request of several source trees, interleaved against one stub; ONE JSON object.

For finding which change made the gateway dearer: each ``--tree NAME=SRC`` (a folder holding the
``turbogate`` package, e.g. ``git archive COMMIT src | tar -x -C /tmp/old`` gives ``/tmp/old/src``)
runs its own one-worker gateway in front of the neutral stub (benchmarks/openai_stub.py), and
``--rounds`` rounds send ``--conns`` keep-alive connections of small chats to each gateway in turn
for ``--seconds`` (benchmarks/common.py's fixed-connection client), so drift in the machine's load
hits every tree alike.  Per tree: the gateway's user + system CPU microseconds per request of each
round, and their median.  CPU time stays meaningful on a shared machine; req/s does not.  The
client's p50 and p99 latency per round come with it: at ``--conns 1 --realtime`` that is the
one-connection latency the issue-15 target is about (gateway_overhead.py's "added p50").

    python benchmarks/gateway_ab.py --tree before=/tmp/old/src --tree after=src [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import common  # what the gateway benchmarks share (benchmarks/common.py)
from openai_stub import start_stub
from turbogate.procs import Service, pin_process, start_service


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=SRC[,CONFIG]",
                    help="a name, the source folder its gateway runs from (PYTHONPATH) and optionally its own "
                    "gateway config (STUB_URL in it is replaced by the stub's URL); repeat")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each tree's run per round")
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--realtime", action="store_true",
                    help="client at SCHED_FIFO priority (root), as gateway_overhead.py's one-connection runs")
    args = ap.parse_args()
    trees: dict[str, tuple[Path, Path | None]] = {}
    for spec in args.tree:
        name, _, rest = spec.partition("=")
        src, _, config = rest.partition(",")
        if not src or not (Path(src) / "turbogate").is_dir():
            ap.error(f"--tree {spec!r}: expected NAME=SRC[,CONFIG] with SRC/turbogate a package folder")
        if config and not Path(config).is_file():
            ap.error(f"--tree {spec!r}: no config file {config}")
        trees[name] = (Path(src).resolve(), Path(config) if config else None)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    stub, url = start_stub({cpus[0]} if len(cpus) >= 2 else None)
    tmp = Path(tempfile.mkdtemp(prefix="tg-ab-"))
    gateways: dict[str, Service] = {}
    try:
        for name, (src, config) in trees.items():
            cfg = tmp / f"gateway-{name}.yaml"  # each its own file: the SQLite store lives beside it
            if config is not None:
                cfg.write_text(config.read_text().replace("STUB_URL", url))
            else:
                common.write_config(cfg, [url], engine="openai")
            gateways[name] = start_service(f"gateway-{name}", ["serve", "--config", str(cfg), "--workers", "1"],
                                           log_dir=tmp, env={"PYTHONPATH": str(src)})
            if len(cpus) >= 2:
                pin_process(gateways[name].process.pid, {cpus[1]})
            common.fixed_run(gateways[name].url, args.conns, 1.0, False)  # warm-up
        rounds: dict[str, list[float]] = {name: [] for name in trees}
        rates: dict[str, list[float]] = {name: [] for name in trees}
        p50s: dict[str, list[float]] = {name: [] for name in trees}
        p99s: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, gw in gateways.items():
                run = common.fixed_run(gw.url, args.conns, args.seconds, args.realtime, gw.process.pid)
                if run.get("server_cpu_us_per_request") is not None:
                    rounds[name].append(float(run["server_cpu_us_per_request"]))  # type: ignore[arg-type]
                    rates[name].append(float(run["rps"]))  # type: ignore[arg-type]
                    p50s[name].append(float(run["p50_ms"]))  # type: ignore[arg-type]
                    p99s[name].append(float(run["p99_ms"]))  # type: ignore[arg-type]
    finally:
        for gw in gateways.values():
            gw.stop()
        stub.kill()
        stub.wait()

    def summary(per_tree: dict[str, list[float]], digits: int) -> dict[str, object]:
        return {name: {"median": round(statistics.median(v), digits) if v else None, "rounds": v}
                for name, v in per_tree.items()}

    print(json.dumps({
        "cpu_us_per_request": summary(rounds, 1), "rps": summary(rates, 1),
        "p50_ms": summary(p50s, 3), "p99_ms": summary(p99s, 3),
        "conns": args.conns, "seconds": args.seconds, "rounds": args.rounds,
        "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
