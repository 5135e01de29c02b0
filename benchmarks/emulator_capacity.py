"""How many requests/s one emulator process serves at --time-scale 0.

Starts ``turbogate emulate --time-scale 0`` on a free port, then drives it from separate load
processes (aiohttp, keep-alive connection pools, many concurrent requests each) so the client
is not the bottleneck: first non-streaming chat completions (``max_rps``: the best rate over
the concurrency levels tried), then streaming ones (``streamed_chunks_per_s``: SSE data
chunks received per second).  ``rps_per_server_cpu_s`` divides the requests by the CPU time the
emulator process used (Linux /proc): its capacity with one core to itself, which holds even on a
small shared machine where the load generator takes CPU from it.  Prints ONE JSON object.

    python benchmarks/emulator_capacity.py [--seconds 5] [--procs 2] [--concurrency 64,256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import aiohttp
import orjson

from turbogate.procs import start_emulator

MODEL = "llama-3.1-8b"


def _body(stream: bool, max_tokens: int) -> bytes:
    body: dict[str, object] = {"model": MODEL, "messages": [{"role": "user", "content": "Say something short."}],
                               "max_tokens": max_tokens, "ignore_eos": True}
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


async def _load(url: str, concurrency: int, seconds: float, stream: bool, max_tokens: int) -> tuple[int, int, int]:
    """Closed loop: ``concurrency`` workers each send back-to-back until the time is up."""
    body = _body(stream, max_tokens)
    headers = {"content-type": "application/json"}
    done = chunks = errors = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker() -> None:
            nonlocal done, chunks, errors
            while time.perf_counter() < deadline:
                async with session.post(url, data=body, headers=headers) as resp:
                    if resp.status != 200:
                        errors += 1
                        await resp.read()
                        continue
                    if stream:
                        async for line in resp.content:
                            if line.startswith(b"data: {"):
                                chunks += 1
                    else:
                        await resp.read()
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, chunks, errors


def _proc(url: str, concurrency: int, seconds: float, stream: bool, max_tokens: int, out: mp.Queue) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    out.put(asyncio.run(_load(url, concurrency, seconds, stream, max_tokens)))


def _cpu_seconds(pid: int | None) -> float | None:
    """CPU time (user + system) a process has used, from /proc (Linux); None elsewhere."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(url: str, procs: int, concurrency: int, seconds: float, stream: bool, max_tokens: int,
             server_pid: int | None = None) -> dict[str, float]:
    out: mp.Queue = mp.Queue()
    cpu_before = _cpu_seconds(server_pid)
    per_proc = max(1, concurrency // procs)
    workers = [mp.Process(target=_proc, args=(url, per_proc, seconds, stream, max_tokens, out)) for _ in range(procs)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    results = [out.get() for _ in workers]
    elapsed = time.perf_counter() - start
    for w in workers:
        w.join()
    done = sum(r[0] for r in results)
    chunks = sum(r[1] for r in results)
    errors = sum(r[2] for r in results)
    cpu_after = _cpu_seconds(server_pid)
    # The window includes process start-up, so these rates are slightly conservative.
    result = {"concurrency": per_proc * procs, "requests": done, "errors": errors, "seconds": round(elapsed, 2),
              "rps": done / elapsed, "chunks_per_s": chunks / elapsed}
    if cpu_before is not None and cpu_after is not None and cpu_after > cpu_before:
        # Requests per CPU-second of the server: what it would serve with one core to itself,
        # a figure that holds on a shared machine where the load generator competes for CPU.
        result["server_cpu_s"] = cpu_after - cpu_before
        result["rps_per_server_cpu_s"] = done / (cpu_after - cpu_before)
        result["chunks_per_server_cpu_s"] = chunks / (cpu_after - cpu_before)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each load phase")
    parser.add_argument("--procs", type=int, default=2, help="load-generator processes")
    parser.add_argument("--concurrency", default="64,256", help="total concurrent requests to try (comma list)")
    parser.add_argument("--max-tokens", type=int, default=16, help="output tokens per non-streaming request")
    parser.add_argument("--stream-tokens", type=int, default=64, help="output tokens per streaming request")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    emulator = start_emulator("--time-scale", "0", "--max-num-seqs", "1024", "--model", MODEL)
    try:
        url = emulator.url + "/v1/chat/completions"
        _measure(url, 1, 8, 1.0, False, args.max_tokens)  # warm-up
        pid = emulator.process.pid
        runs = [_measure(url, args.procs, c, args.seconds, False, args.max_tokens, pid) for c in levels]
        streamed = _measure(url, args.procs, levels[-1], args.seconds, True, args.stream_tokens, pid)
    finally:
        emulator.stop()
    best = max(runs, key=lambda r: r["rps"])
    print(json.dumps({
        "max_rps": round(best["rps"], 1),
        "streamed_chunks_per_s": round(streamed["chunks_per_s"], 1),
        "rps_per_server_cpu_s": round(best.get("rps_per_server_cpu_s", 0.0), 1) or None,
        "server": "uvicorn + httptools + uvloop, raw ASGI app, one process, --time-scale 0",
        "client": {"library": f"aiohttp {aiohttp.__version__}", "processes": args.procs,
                   "max_tokens": args.max_tokens, "stream_tokens": args.stream_tokens, "seconds": args.seconds},
        "runs": [{k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()} for r in runs],
        "stream_run": {k: round(v, 1) if isinstance(v, float) else v for k, v in streamed.items()},
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }))


if __name__ == "__main__":
    main()
