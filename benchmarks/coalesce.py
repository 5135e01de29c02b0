"""Coalescing: upstream calls saved and client latency, coalescing on vs off, and what the key
costs per request.

One real-time emulator (``--time-scale 1``) behind two one-worker gateways, one with coalescing on
for chat, one without.  Each gateway gets the same bursts: ``--bursts`` times, ``--size``
identical ``temperature: 0`` requests at once (a new prompt per burst), plain and streamed.  The
emulator's own request counter says how many upstream calls each made.  The key's cost is timed
in-process for a small body and a large one.

Prints ONE JSON object.  Run: ``python benchmarks/coalesce.py [--bursts 20] [--size 8]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import aiohttp
import yaml

from turbogate.config import hash_key
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results.percentile import percentile
from turbogate.sched.coalesce import request_key

KEY = "sk-bench"
MODEL = "llama-3.1-8b"
CHAT = "/v1/chat/completions"


def upstream_calls(emulator: Service) -> float:
    with urllib.request.urlopen(emulator.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith("turbogate_emulator_requests_total") and f'endpoint="{CHAT}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise RuntimeError("the emulator has no turbogate_emulator_requests_total")


def gateway(folder: Path, emulator: Service, coalesce: bool) -> Service:
    cfg = {
        "tenants": [{"name": "bench", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "p", "models": [MODEL], "replicas": [{"url": emulator.url, "engine": "emulator"}]}],
    }
    if coalesce:
        cfg["coalesce"] = {"routes": [CHAT]}
    path = folder / f"gateway-{'on' if coalesce else 'off'}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return start_gateway(path, log_dir=folder / "logs")


async def bursts(url: str, n_bursts: int, size: int, stream: bool) -> list[float]:
    """Latency (ms) of every request, to the last byte."""
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    latencies: list[float] = []
    async with aiohttp.ClientSession() as session:

        async def one(payload: bytes) -> None:
            t0 = time.perf_counter()
            async with session.post(url + CHAT, data=payload, headers=headers) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            latencies.append((time.perf_counter() - t0) * 1000)

        for _ in range(n_bursts):
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"burst {uuid.uuid4().hex}"}],
                    "max_tokens": 32, "temperature": 0, "stream": stream}
            payload = json.dumps(body).encode()
            await asyncio.gather(*(one(payload) for _ in range(size)))
    return latencies


def key_cost_us(body: dict[str, object], repeat: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        request_key("bench", CHAT, body, ("standard", "standard", ""))
    return (time.perf_counter() - t0) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bursts", type=int, default=20, help="bursts per gateway and mode")
    parser.add_argument("--size", type=int, default=8, help="identical requests per burst")
    args = parser.parse_args()
    out: dict[str, object] = {"bursts": args.bursts, "size": args.size, "emulator_time_scale": 1}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        emulator = start_emulator("--time-scale", "1", "--model", MODEL, log_dir=folder / "logs")
        gateways = {"on": gateway(folder, emulator, True), "off": gateway(folder, emulator, False)}
        try:
            for mode in ("plain", "stream"):
                for name, gw in gateways.items():
                    before = upstream_calls(emulator)
                    lat = asyncio.run(bursts(gw.url, args.bursts, args.size, mode == "stream"))
                    out[f"{mode}_{name}"] = {
                        "requests": len(lat), "upstream_calls": upstream_calls(emulator) - before,
                        "p50_ms": round(statistics.median(lat), 2), "p95_ms": round(percentile(lat, 95), 2)}
        finally:
            for gw in gateways.values():
                gw.stop()
            emulator.stop()
    small = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi"}], "temperature": 0, "max_tokens": 16}
    large = {**small, "messages": [{"role": "user", "content": "word " * 20_000}] * 5}  # ~500 KB
    out["key_us"] = {"small_body": round(key_cost_us(small, 20_000), 2),
                     "500kb_body": round(key_cost_us(large, 50), 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
