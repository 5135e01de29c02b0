"""What L3 adds to a request's ``Flow.open``: microseconds per open (and close) with one pool for
the model (no L3), and with the model served by two and by four regional pools (L3 ranks them),
each pool 8 replicas with fresh metrics, half the requests carrying a session, one request per
virtual millisecond (so each pool's L1/L2 view is re-read every ``view_ttl_s`` = 50 requests).
Pure core, no sockets.  Prints ONE JSON object.

    python benchmarks/l3_choice.py [--requests 20000] [--repeats 5]

Each figure is the fastest of ``--repeats`` rounds (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from turbogate.sched import (
    Flow,
    FlowPolicy,
    FlowRequest,
    PickerConfig,
    PoolSpec,
    ReplicaLoad,
    ReplicaSpec,
    TenantSpec,
    Tier,
)
from turbogate.sched.admission import TierPolicy
from turbogate.sched.regions import RegionPolicy

REGIONS = ("eu", "us", "ap", "sa")


def build(pools: int) -> Flow:
    specs = tuple(PoolSpec(f"pool-{r}", ("m",), tuple(ReplicaSpec(f"{r}/{i}") for i in range(8)),
                           region=r if pools > 1 else None) for r in REGIONS[:pools])
    rtt = {c: {r: (10.0 if c == r else 90.0) for r in REGIONS[:pools]} for c in REGIONS[:pools]}
    policy = FlowPolicy(tiers={t: TierPolicy() for t in Tier}, tenants=(TenantSpec("acme", frozenset(Tier)),),
                        pools=specs, regions=RegionPolicy(rtt_ms=rtt) if pools > 1 else None,
                        picker=PickerConfig(stale_after_s=1e9))  # the one scrape stays fresh for the run
    flow = Flow(policy)
    for r in flow.picker.replicas():
        flow.scraped(r.id, ReplicaLoad(running=0, waiting=0, kv_usage=0.1), 0.0)
    return flow


def measure(pools: int, requests: int, repeats: int) -> dict[str, float]:
    flow = build(pools)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(requests):
            req = flow.open(tenant="acme", model="m", now=1.0 + i * 0.001, client_region=REGIONS[i % pools],
                            session=str(i % 500) if i % 2 else None)
            assert isinstance(req, FlowRequest)
        best = min(best, time.perf_counter() - start)
    return {"pools": pools, "us_per_open": round(best / requests * 1e6, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = [measure(n, args.requests, args.repeats) for n in (1, 2, 4)]
    json.dump({"benchmark": "l3_choice", "requests": args.requests, "rows": rows}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
