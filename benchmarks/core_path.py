"""CPU per request of the pure core (sched/) on the gateway's common path, in process.

The gateway calls the flow for every request: ``open`` → ``arrive`` (a ``Dispatch`` when a
replica has room) → ``finished``, and ``wake_at`` after an event batch that moved the flow's
``timers_epoch`` (gateway/driver.py).
This loop makes those calls with a fake clock on a flow built from a config like the one
``benchmarks/gateway_overhead.py`` writes (one pool, one scraped replica, ``max_concurrency``
1024), a scrape every 0.5 s of fake time, and ``--connections`` requests kept in flight
(1: back to back; 32: as wrk's 32 connections).  No sockets, no event loop: the figure is the
core's own share of the gateway's CPU per request.

Prints one JSON object: process-CPU µs per request for each connection count, the best of
``--rounds`` rounds (the least disturbed by other work on the machine).
``--profile`` prints a cProfile table of one round instead.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from collections import deque

from turbogate.config import hash_key, parse_config
from turbogate.configpolicy import flow_policy
from turbogate.sched.actions import Action, Dispatch, FlowRequest, Respond
from turbogate.sched.flow import Flow
from turbogate.sched.load import ReplicaLoad

MODEL = "bench-model"
REPLICA = "http://127.0.0.1:9/v1"
#: Fake time between two requests' events, and between two scrapes (the config's default interval).
STEP_S = 100e-6
SCRAPE_EVERY_S = 0.5
#: Requests before measuring: enough scrapes for slow start to grow the limit from 8 past 32.
WARM_UP = 40000


def build_flow() -> Flow:
    """The flow of a gateway serving gateway_overhead.py's config (one pool, one emulator replica)."""
    config = parse_config({
        "tenants": [{"name": "bench", "key_sha256": hash_key("sk-bench"), "tiers": ["turbo", "standard", "relax"]}],
        "tiers": {"standard": {"capacity_share": 1.0, "max_utilization": 1.0, "queue_bound": 100000}},
        "pools": [{"name": "bench", "models": [MODEL],
                   "replicas": [{"url": REPLICA, "engine": "emulator", "max_concurrency": 1024}]}],
    })
    return Flow(flow_policy(config))


def run(flow: Flow, requests: int, connections: int, start: float) -> tuple[float, int]:
    """Serve ``requests`` requests with ``connections`` open at once: the fake clock's end, and
    how many of them waited in the queue (a limit still growing) instead of going at once."""
    now = start
    next_scrape = now
    replica_id = flow.picker.replicas()[0].id
    upstream: deque[FlowRequest] = deque()  # dispatched, in dispatch order (the oldest answers first)
    open_count = 0
    served = queued = 0
    looked = -1  # as the driver: wake_at only when the flow's timers_epoch moved since the last look

    def wake() -> None:
        nonlocal looked
        if flow.timers_epoch != looked:
            looked = flow.timers_epoch
            flow.wake_at()

    while served < requests:
        now += STEP_S
        if now >= next_scrape:  # the scraper's view: what we run, no queue, a light KV cache
            replica = flow.picker.get(replica_id)
            load = ReplicaLoad(running=float(replica.in_flight), waiting=0.0, kv_usage=0.1)
            _collect(flow.scraped(replica_id, load, now), upstream)  # a grown limit lets queued ones go
            wake()
            next_scrape = now + SCRAPE_EVERY_S
        if open_count >= connections:
            req = upstream.popleft()
            req.prompt_tokens, req.completion_tokens = 20, 8
            _collect(flow.finished(req, now, 200), upstream)
            wake()
            open_count -= 1
            served += 1
        opened = flow.open(tenant="bench", model=MODEL, prompt_bytes=200, now=now)
        assert not isinstance(opened, Respond), opened
        if not _collect(flow.arrive(opened, now), upstream):
            queued += 1
        wake()
        open_count += 1
    # Close what is still open, so the next round starts from an idle flow.
    while upstream:
        _collect(flow.finished(upstream.popleft(), now, 200), upstream)
    return now, queued


def _collect(actions: list[Action], upstream: deque[FlowRequest]) -> int:
    """Queue the dispatched requests as the replica's; how many there were (anything else is a bug here)."""
    for action in actions:
        assert isinstance(action, Dispatch), action
        upstream.append(action.req)
    return len(actions)


def measure(requests: int, connections: int, rounds: int) -> tuple[float, int]:
    """Best-of-``rounds`` process-CPU µs per request on one warm flow (each round continues its
    clock), and the requests of the measured rounds that were queued rather than sent at once."""
    flow = build_flow()
    now, _ = run(flow, WARM_UP, connections, 0.0)  # the concurrency limit grows past `connections`
    best = float("inf")
    queued = 0
    for _ in range(rounds):
        t0 = time.process_time()
        now, q = run(flow, requests, connections, now)
        best = min(best, (time.process_time() - t0) / requests * 1e6)
        queued += q
    return best, queued


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000, help="requests per round (default 20000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the best is reported (default 7)")
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 32],
                        help="requests kept in flight, one figure each (default 1 32)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile table of one round instead")
    args = parser.parse_args(argv)
    if args.profile:
        flow = build_flow()
        now, _ = run(flow, WARM_UP, args.connections[0], 0.0)
        prof = cProfile.Profile()
        prof.runcall(run, flow, args.requests, args.connections[0], now)
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(30)
        return 0
    out: dict[str, object] = {"requests_per_round": args.requests, "rounds": args.rounds,
                              "python": sys.version.split()[0]}
    for c in args.connections:
        us, queued = measure(args.requests, c, args.rounds)
        out[f"core_us_per_request_c{c}"] = round(us, 2)
        out[f"queued_requests_c{c}"] = queued
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
