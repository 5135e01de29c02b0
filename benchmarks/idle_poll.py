#!/usr/bin/env python3
"""What the event loop's adaptive idle poll buys and what it costs, side by side in one run
(gateway/busypoll.py; ``listen.idle_poll_max_us``, on by default).  Prints ONE JSON object.

Two gateways with the same config but for the poll — ``adaptive`` (the default) and ``off``
(``idle_poll_max_us: 0``) — run one after the other, pinned to one core, in front of:

- **a fast engine**: the neutral OpenAI stub (benchmarks/openai_stub.py), answering in about
  0.1 ms, on the other core; one keep-alive connection sending small chats back to back.  Here
  the window opens and the gateway's added latency falls (docs/gateway.md, twelfth pass);
- **a slow engine**: an emulated H100 serving llama-3.1-8b at real speed (``turbogate emulate``:
  answers after tens of milliseconds, stream chunks every few), with 1 and 16 connections of small
  chats and 16 connections of 32-token streams.  Here every idle period is past the cap, the window
  stays shut, and what the poll costs is what it must not: CPU.

Per run: p50/p99 latency (ms), requests, the gateway's CPU per request (user + system time of its
process), the share of the run's wall time its loop polled (``turbogate_idle_poll_seconds_total``'s
rate) and its window at the end (``turbogate_idle_poll_window_seconds``), and the hypervisor's
steal share during the run (a run with more than ``QUIET_STEAL`` is a neighbour's as much).

    python benchmarks/idle_poll.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import common  # what the gateway benchmarks share (benchmarks/common.py)
from openai_stub import start_stub
from turbogate.procs import (
    QUIET_STEAL,
    machine_facts,
    pin_process,
    start_emulator,
    start_gateway,
)

SETTINGS = {"adaptive": {}, "off": {"idle_poll_max_us": 0}}


def _poll_metrics(url: str) -> tuple[float, float]:
    """The gateway's polled seconds so far and its window now (0, 0 with the poll off)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith("turbogate_idle_poll")}
    return values.get("turbogate_idle_poll_seconds_total", 0.0), values.get("turbogate_idle_poll_window_seconds", 0.0)


def measure(url: str, pid: int, conns: int, seconds: float, stream: bool = False) -> dict[str, object]:
    """One run from a separate process (benchmarks/common.py's wrk-style client), with the gateway's
    CPU, the share of the time its loop polled and its window at the end."""
    polled0, _ = _poll_metrics(url)
    t0 = time.perf_counter()
    result = common.fixed_run(url, conns, seconds, False, pid, stream=stream)
    wall = time.perf_counter() - t0
    polled1, window = _poll_metrics(url)
    cpu = result.pop("server_cpu_us_per_request")
    result["gateway_cpu_us_per_request"] = cpu
    result["poll_share"] = round((polled1 - polled0) / wall, 4)
    result["window_us_at_end"] = round(window * 1e6, 1)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="length of each run")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every run, the two settings interleaved")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    engine_cpus, gateway_cpus = ({cpus[0]}, {cpus[1]}) if len(cpus) >= 2 else (None, None)
    tmp = Path(tempfile.mkdtemp(prefix="tg-idle-poll-"))
    stub, stub_url = start_stub(engine_cpus)
    emulator = start_emulator("--gpu", "H100-SXM", "--model", common.MODEL, "--max-num-seqs", "256", log_dir=tmp)
    if engine_cpus:
        pin_process(emulator.process.pid, engine_cpus)
    gateways = {}
    try:
        for name, listen in SETTINGS.items():
            for engine, url, kind in (("fast", stub_url, "openai"), ("slow", emulator.url, "emulator")):
                cfg = tmp / f"{name}-{engine}.yaml"
                common.write_config(cfg, [url], engine=kind, listen=listen)
                gw = gateways[name, engine] = start_gateway(cfg, "--workers", "1", log_dir=tmp)
                if gateway_cpus:
                    pin_process(gw.process.pid, gateway_cpus)
        cases = {"fast_engine_1_connection": ("fast", 1, False), "slow_engine_1_connection": ("slow", 1, False),
                 "slow_engine_16_connections": ("slow", 16, False), "slow_engine_16_streams": ("slow", 16, True)}
        runs: dict[str, dict[str, list[dict[str, object]]]] = {case: {n: [] for n in SETTINGS} for case in cases}
        for gw in gateways.values():  # warm-up: connections made, the window learnt
            measure(gw.url, gw.process.pid, 1, 0.5)
        for _ in range(args.rounds):
            for case, (engine, conns, stream) in cases.items():
                for name in SETTINGS:
                    gw = gateways[name, engine]
                    runs[case][name].append(measure(gw.url, gw.process.pid, conns, args.seconds, stream))
    finally:
        for gw in gateways.values():
            gw.stop()
        emulator.stop()
        stub.kill()
        stub.wait()
    out: dict[str, object] = {"seconds": args.seconds, "rounds": args.rounds, "cpus": os.cpu_count(),
                              "load_average_1m": round(os.getloadavg()[0], 2), "machine": machine_facts(),
                              "runs": runs}
    # The figures that answer the two questions, from the medians over the rounds.
    def median(case: str, name: str, key: str) -> float:
        values = sorted(float(r[key]) for r in runs[case][name] if r.get(key) is not None)  # type: ignore[arg-type]
        return values[len(values) // 2] if values else float("nan")

    out["fast_engine_p50_ms"] = {n: median("fast_engine_1_connection", n, "p50_ms") for n in SETTINGS}
    out["slow_engine_cpu_us_per_request"] = {
        case: {n: median(case, n, "gateway_cpu_us_per_request") for n in SETTINGS} for case in cases if "slow" in case}
    out["slow_engine_poll_share"] = {case: median(case, "adaptive", "poll_share") for case in cases if "slow" in case}
    steals = [float(r["steal_share"]) for c in runs.values() for rs in c.values() for r in rs  # type: ignore[arg-type]
              if isinstance(r.get("steal_share"), float | int)]
    out["steal_share_max"] = max(steals, default=None)
    out["machine_quiet"] = bool(steals) and max(steals) <= QUIET_STEAL
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
