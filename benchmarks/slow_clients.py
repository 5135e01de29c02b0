"""Slow-client soak (issue 12): 1,000 slowloris connections beside normal traffic.

A real gateway (default limits: headers must be complete within 10 s) in front of one emulator
(--time-scale 0.1).  Normal traffic: ``--rps`` small chat completions per second, open loop.
First normal traffic alone (the baseline), then the same beside ``--slowloris`` connections that
each send a request line and then one header line a second, never finishing, and reconnect
whenever the gateway cuts them.

Prints one JSON object: normal p50/p99 latency alone and with the slowloris connections (and
their ratio: target ≤ 2), normal errors, the gateway's RSS at start, peak and end (MB; target:
peak under 2× start + 50 MB), slowloris connections held open on average and how many the
gateway cut.

    python benchmarks/slow_clients.py [--seconds 30] [--slowloris 1000] [--rps 20]

All traffic stays on 127.0.0.1; every loop is bounded by ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from common import rss_mb
from turbogate.config import hash_key
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results.percentile import percentile

MODEL, KEY = "llama-3.1-8b", "sk-slow"


async def normal(gw: Service, seconds: float, rps: float, rng: random.Random) -> tuple[list[float], Counter[str]]:
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}

    async def one(session: aiohttp.ClientSession) -> None:
        start = time.perf_counter()
        try:
            async with session.post(gw.url + "/v1/chat/completions", json=body) as resp:
                await resp.read()
                if resp.status != 200:
                    errors[str(resp.status)] += 1
                    return
        except aiohttp.ClientError as exc:
            errors[type(exc).__name__] += 1
            return
        latencies.append(time.perf_counter() - start)

    tasks = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"},
                                     timeout=aiohttp.ClientTimeout(total=30)) as session:
        end = time.perf_counter() + seconds
        next_at = time.perf_counter()
        while next_at < end:
            next_at += rng.expovariate(rps)
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            tasks.append(asyncio.get_running_loop().create_task(one(session)))
        await asyncio.gather(*tasks)
    return latencies, errors


class Slowloris:
    def __init__(self, port: int) -> None:
        self.port = port
        self.open = 0
        self.cut = 0
        self.samples: list[int] = []

    async def one(self, end: float) -> None:
        while time.perf_counter() < end:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            self.open += 1
            try:
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
                i = 0
                while time.perf_counter() < end and not reader.at_eof():
                    try:
                        await asyncio.wait_for(reader.read(4096), 1.0)  # the gateway's 408, or its close
                    except TimeoutError:
                        writer.write(b"x-slow-%d: 1\r\n" % i)
                        i += 1
                        continue
                    if reader.at_eof():
                        self.cut += 1
            except (ConnectionError, OSError):
                self.cut += 1
            finally:
                self.open -= 1
                writer.close()

    async def sample(self, end: float) -> None:
        while time.perf_counter() < end:
            self.samples.append(self.open)
            await asyncio.sleep(0.5)


def run_slowloris(port: int, n: int, seconds: float, out: Any) -> None:
    """In a process of its own, so the slow connections' work does not delay the measuring client."""
    async def go() -> None:
        loris = Slowloris(port)
        end = time.perf_counter() + seconds
        await asyncio.gather(loris.sample(end), *(loris.one(end) for _ in range(n)), return_exceptions=True)
        held = loris.samples[4:] or [0]
        out.put({"open_mean": round(sum(held) / len(held)), "cut": loris.cut})

    asyncio.run(go())


async def soak(gw: Service, seconds: float, slow_n: int, rps: float) -> dict[str, Any]:
    rng = random.Random(1)
    alone, errors_alone = await normal(gw, seconds / 2, rps, rng)
    rss_start = rss_mb(gw.process.pid)
    peak = rss_start
    results: Any = multiprocessing.get_context("spawn").Queue()
    slow = multiprocessing.get_context("spawn").Process(target=run_slowloris,
                                                        args=(gw.port, slow_n, seconds + 4, results))
    slow.start()
    end = time.perf_counter() + seconds + 4

    async def sample_rss() -> None:
        nonlocal peak
        while time.perf_counter() < end:
            peak = max(peak, rss_mb(gw.process.pid))
            await asyncio.sleep(0.5)

    sampler = asyncio.get_running_loop().create_task(sample_rss())
    await asyncio.sleep(3)  # let the slow connections open
    beside, errors_beside = await normal(gw, seconds, rps, rng)
    await sampler
    loris = await asyncio.to_thread(results.get, True, 60)
    slow.join(10)
    rss_end = rss_mb(gw.process.pid)
    p99_alone, p99_beside = percentile(alone, 99), percentile(beside, 99)
    ratio = None if not p99_alone or p99_beside is None else round(p99_beside / p99_alone, 2)
    return {
        "seconds": seconds, "slowloris": slow_n, "normal_rps": rps,
        "normal_alone": {"n": len(alone), "p50_s": percentile(alone, 50), "p99_s": p99_alone,
                         "errors": dict(errors_alone)},
        "normal_beside_slowloris": {"n": len(beside), "p50_s": percentile(beside, 50), "p99_s": p99_beside,
                                    "errors": dict(errors_beside)},
        "p99_ratio": ratio,
        "rss_mb": {"start": round(rss_start, 1), "peak": round(peak, 1), "end": round(rss_end, 1)},
        "slowloris_open_mean": loris["open_mean"], "slowloris_cut_by_gateway": loris["cut"],
        "pass": {"p99_within_2x": ratio is not None and ratio <= 2.0, "memory_bounded": peak < 2 * rss_start + 50,
                 "no_normal_errors": not errors_beside},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="the slowloris phase (the baseline runs half)")
    ap.add_argument("--slowloris", type=int, default=1000)
    ap.add_argument("--rps", type=float, default=20.0)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        emu = start_emulator("--model", MODEL, "--time-scale", "0.1", log_dir=folder)
        config = {"tenants": [{"name": "slow", "key_sha256": hash_key(KEY)}],
                  "pools": [{"name": "main", "models": [MODEL], "replicas": [{"url": emu.url, "engine": "emulator"}]}]}
        path = folder / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        try:
            with start_gateway(path, "--log-level", "warning", log_dir=folder) as gw:
                out = asyncio.run(soak(gw, args.seconds, args.slowloris, args.rps))
        finally:
            emu.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
