"""What the store costs the gateway: the same gateway with the memory, SQLite and Redis stores,
measured in one run against one emulator at ``--time-scale 0`` (answers cost ~nothing, so the
gateway's own work is what is measured).  Every request writes its usage record before its
final byte, so this is the price of metering durably.

Prints ONE JSON object: per store, the closed-loop throughput and the sequential p50 latency,
each store's added p50 and throughput ratio against memory (target: within 10 %), and whether
the usage totals in each store agree with ``turbogate bench``'s own count of tokens.
Run: ``python benchmarks/store_overhead.py [--requests 600] [--seconds 4] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import _load_worker, cpu_seconds, unary_latency  # the same clients, one copy
from turbogate.config import hash_key
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results.percentile import percentile
from turbogate.store.redisproc import RedisServer

KEY = "sk-bench"
COUNT_KEY = "sk-bench-counted"  # the tenant whose tokens turbogate bench counts
ADMIN = "bench-admin"
MODEL = "llama-3.1-8b"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}
STORES = ("memory", "sqlite", "redis")


def throughput(url: str, concurrency: int, seconds: float, pids: list[int]) -> tuple[float, int, float]:
    """Completed requests per second under a closed loop, errors, and the CPU microseconds per
    request of ``pids`` (the gateway, and redis-server for the Redis store): on a machine whose
    cores the load shares, CPU per request is the steadier figure."""
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    worker = ctx.Process(target=_load_worker, args=(url, concurrency, seconds, queue))
    t0 = time.perf_counter()
    cpu0 = sum(cpu_seconds(p) for p in pids)
    worker.start()
    ok, errors = queue.get(timeout=seconds + 60)
    cpu = sum(cpu_seconds(p) for p in pids) - cpu0
    worker.join()
    return ok / min(time.perf_counter() - t0, seconds + 0.5), errors, (cpu * 1e6 / ok if ok else 0.0)


def write_config(path: Path, emulator: str, store: dict[str, object]) -> None:
    import yaml

    path.write_text(yaml.safe_dump({
        "admin": {"token_sha256": hash_key(ADMIN)},
        "tenants": [{"name": "bench", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]},
                    {"name": "counted", "key_sha256": hash_key(COUNT_KEY), "tiers": ["turbo", "standard"]}],
        "tiers": {"standard": {"capacity_share": 1.0, "max_utilization": 1.0, "queue_bound": 100000}},
        "pools": [{"name": "bench", "models": [MODEL],
                   "replicas": [{"url": emulator, "engine": "emulator", "max_concurrency": 1024}]}],
        "store": store,
    }))


def usage_totals(url: str) -> dict[str, int]:
    req = urllib.request.Request(url + "/admin/usage?tenant=counted&group_by=tenant",
                                 headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        rows = json.loads(resp.read())["data"]
    ok = [r for r in rows]
    return {"requests": sum(r["requests"] - r["errors"] for r in ok),
            "prompt_tokens": sum(r["prompt_tokens"] for r in ok),
            "completion_tokens": sum(r["completion_tokens"] for r in ok)}


def bench_count(url: str, out: Path, seconds: float) -> dict[str, int]:
    """Run ``turbogate bench`` against the gateway; its own count of tokens and answers."""
    from turbogate.results import load_run

    subprocess.run([sys.executable, "-m", "turbogate", "bench", "--host", url, "--model", MODEL, "--qps", "20",
                    "--duration", str(seconds), "--prompt-tokens", "24:8:8:40", "--output-tokens", "12:4:4:20",
                    "--tiers", "turbo=0.5,standard=0.5", "--api-key", COUNT_KEY, "--no-live", "--no-report",
                    "--out", str(out)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = [r for r in load_run(out, with_samples=False).requests if r.status == 200]
    return {"requests": len(done), "prompt_tokens": sum(r.prompt_tokens or 0 for r in done),
            "completion_tokens": sum(r.output_tokens or 0 for r in done)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600, help="sequential requests per store (latency)")
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each throughput load")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds (the stores take turns)")
    parser.add_argument("--concurrency", type=int, default=64, help="connections of the closed-loop load")
    parser.add_argument("--bench-seconds", type=float, default=3.0, help="turbogate bench run per store")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="tg-store-bench-"))
    services: list[Service] = []
    redis = RedisServer(tmp / "redis")
    try:
        redis.start()
        emulator = start_emulator("--time-scale", "0", "--max-num-seqs", "1024", log_dir=tmp)
        services.append(emulator)
        stores = {"memory": {"kind": "memory"}, "sqlite": {"kind": "sqlite", "path": str(tmp / "state.sqlite3")},
                  "redis": {"kind": "redis", "url": redis.url}}
        gateways: dict[str, Service] = {}
        for name, store in stores.items():
            cfg = tmp / f"gateway-{name}.yaml"
            write_config(cfg, emulator.url, store)
            gateways[name] = start_gateway(cfg, log_dir=tmp)
            services.append(gateways[name])
        urls = {name: g.url for name, g in gateways.items()}
        lat = asyncio.run(unary_latency(urls, args.requests))
        rps: dict[str, list[float]] = {name: [] for name in STORES}
        cpu: dict[str, list[float]] = {name: [] for name in STORES}
        errors = dict.fromkeys(STORES, 0)
        assert redis.process is not None
        pids = {name: [g.process.pid] for name, g in gateways.items()}
        pids["redis"].append(redis.process.pid)
        for r in range(args.rounds):
            order = STORES if r % 2 == 0 else tuple(reversed(STORES))
            for name in order:
                value, errs, us = throughput(urls[name], args.concurrency, args.seconds, pids[name])
                rps[name].append(value)
                cpu[name].append(us)
                errors[name] += errs
        counts = {name: {"bench": bench_count(urls[name], tmp / f"bench-{name}", args.bench_seconds),
                         "store": usage_totals(urls[name])} for name in STORES}
        base_p50 = percentile(lat["memory"], 50)
        base_rps = statistics.median(rps["memory"])
        base_cpu = statistics.median(cpu["memory"])
        result: dict[str, object] = {}
        for name in STORES:
            p50, med = percentile(lat[name], 50), statistics.median(rps[name])
            result[name] = {
                "throughput_rps": round(med, 1), "throughput_rounds": [round(x, 1) for x in rps[name]],
                "load_errors": errors[name], "p50_ms": round(p50, 3), "p99_ms": round(percentile(lat[name], 99), 3),
                "added_p50_ms": round(p50 - base_p50, 3), "throughput_vs_memory": round(med / base_rps, 3),
                "cpu_us_per_request": round(statistics.median(cpu[name]), 1),
                "added_cpu_us_per_request": round(statistics.median(cpu[name]) - base_cpu, 1),
                "within_10pct": bool(med >= 0.9 * base_rps) if name != "memory" else None,
                "usage_agrees_with_bench": counts[name]["bench"] == counts[name]["store"],
                "bench_count": counts[name]["bench"], "store_count": counts[name]["store"],
            }
        print(json.dumps({
            "benchmark": "store_overhead", "stores": result,
            "target": "SQLite and Redis throughput each within 10 % of memory",
            "meets_target": all(result[n]["within_10pct"] for n in ("sqlite", "redis")),  # type: ignore[index]
            "usage_totals_agree": all(result[n]["usage_agrees_with_bench"] for n in STORES),  # type: ignore[index]
            "setup": {"requests": args.requests, "seconds": args.seconds, "rounds": args.rounds,
                      "concurrency": args.concurrency, "cpus": os.cpu_count(), "gateway_workers": 1,
                      "note": "one machine: gateway, emulator, Redis and the load share its cores"},
        }))
    finally:
        for s in reversed(services):
            s.stop()
        redis.stop()


if __name__ == "__main__":
    main()
