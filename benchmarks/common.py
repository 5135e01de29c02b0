"""What the gateway benchmarks share: the bench tenant's key and model, the small chat they send,
a one-pool gateway config, and the measurement primitives — sequential latency, a closed-loop load
worker, a wrk-style fixed-connection run from its own process, a process's CPU time and memory — and
what the fidelity benchmarks (``sim`` against ``bench``) share: their emulator fleet behind a gateway,
its config and fleet file, and the relative error.  Each script imports it as a sibling (``import
common``): a script's folder is on its import path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from turbogate.config import hash_key
from turbogate.procs import Service, start_emulator, start_gateway, steal_mark, steal_share_since
from turbogate.results.percentile import percentile

KEY = "sk-bench"
MODEL = "llama-3.1-8b"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}
STREAM_BODY = {**BODY, "stream": True}


async def unary_latency(targets: dict[str, str], n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in targets}
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    payload = json.dumps(BODY).encode()
    async with aiohttp.ClientSession() as session:
        for i in range(n + 50):
            for name, url in targets.items():
                t0 = time.perf_counter()
                async with session.post(url + "/v1/chat/completions", data=payload, headers=headers) as resp:
                    await resp.read()
                    assert resp.status == 200, resp.status
                if i >= 50:  # warm-up
                    out[name].append((time.perf_counter() - t0) * 1000)
    return out


def _load_worker(url: str, concurrency: int, seconds: float, queue: mp.Queue) -> None:  # type: ignore[type-arg]
    # The load uses the gateway's own lean client: aiohttp's client cost about as much CPU per
    # request as the gateway itself, and on a small machine the load generator shares its cores.
    from turbogate.errors import UpstreamError
    from turbogate.httpclient import UpstreamPool

    async def run() -> tuple[int, int]:
        client = UpstreamPool(url, headers={"Authorization": f"Bearer {KEY}"})
        payload = json.dumps(BODY).encode()
        ok = errors = 0
        stop = time.perf_counter() + seconds

        async def loop() -> None:
            nonlocal ok, errors
            while time.perf_counter() < stop:
                try:
                    resp = await client.request(b"POST", "/v1/chat/completions", payload)
                    await resp.read()
                    resp.release()
                    if resp.status == 200:
                        ok += 1
                    else:
                        errors += 1
                except UpstreamError:
                    errors += 1

        await asyncio.gather(*(loop() for _ in range(concurrency)))
        client.close()
        return ok, errors

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    queue.put(asyncio.run(run()))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def max_rps(url: str, procs: int, concurrency: int, seconds: float, pid: int | None = None) -> tuple[float, int, float]:
    """Completed requests per second under a closed loop; with ``pid``, also that process's CPU
    microseconds per request (what one dedicated core could sustain is 1e6 / that)."""
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    workers = [ctx.Process(target=_load_worker, args=(url, concurrency, seconds, queue)) for _ in range(procs)]
    t0 = time.perf_counter()
    cpu0 = cpu_seconds(pid) if pid else 0.0
    for w in workers:
        w.start()
    results = [queue.get(timeout=seconds + 60) for _ in workers]
    cpu = cpu_seconds(pid) - cpu0 if pid else 0.0
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    ok = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    # Count against the load window, not process start-up.
    return ok / min(elapsed, seconds + 0.5), errors, (cpu * 1e6 / ok if ok else 0.0)


def rss_mb(pid: int) -> float:
    """A process's resident memory in MiB (Linux /proc; 0 where it says none)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _fixed_worker(url: str, conns: int, seconds: float, realtime: bool, queue: mp.Queue,  # type: ignore[type-arg]
                  stream: bool = False) -> None:
    """``conns`` keep-alive connections, each sending the same small chat back to back (like wrk);
    with ``stream``, a 32-token stream read to its last chunk."""
    from turbogate.errors import UpstreamError
    from turbogate.httpclient import UpstreamPool

    async def run() -> tuple[list[float], int]:
        client = UpstreamPool(url, headers={"Authorization": f"Bearer {KEY}"})
        payload = json.dumps({**STREAM_BODY, "max_tokens": 32} if stream else BODY).encode()
        lat: list[float] = []
        errors = 0
        stop = time.perf_counter() + seconds

        async def loop() -> None:
            nonlocal errors
            while (t0 := time.perf_counter()) < stop:
                try:
                    resp = await client.request(b"POST", "/v1/chat/completions", payload)
                    if stream:
                        while await resp.next_chunk():
                            pass
                    else:
                        await resp.read()
                    resp.release()
                    if resp.status == 200:
                        lat.append(time.perf_counter() - t0)
                    else:
                        errors += 1
                except UpstreamError:
                    errors += 1

        await asyncio.gather(*(loop() for _ in range(conns)))
        client.close()
        return lat, errors

    if realtime:
        set_realtime(0, True)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    lat, errors = asyncio.run(run())
    ms = sorted(x * 1000 for x in lat)
    queue.put({"requests": len(ms), "errors": errors, "rps": round(len(ms) / seconds, 1),
               "p50_ms": _rounded(percentile(ms, 50), 3), "p99_ms": _rounded(percentile(ms, 99), 3)})


def set_realtime(pid: int, on: bool) -> bool:
    """SCHED_FIFO priority 10 for ``pid`` (0: this process), or back to normal; False where not allowed."""
    try:
        if on:
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(10))
        else:
            os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
    except (AttributeError, OSError):
        return False
    return True


def fixed_run(url: str, conns: int, seconds: float, realtime: bool, pid: int | None = None,
              stream: bool = False) -> dict[str, object]:
    """One wrk-style run from a separate process; with ``pid``, that process's CPU per request too,
    and the share of the machine's CPU time the hypervisor stole meanwhile (``steal_share``: a
    virtual machine's neighbours at work; its CPU figures then read high)."""
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    worker = ctx.Process(target=_fixed_worker, args=(url, conns, seconds, realtime, queue, stream))
    cpu0 = cpu_seconds(pid) if pid else 0.0
    steal_at = steal_mark()
    worker.start()
    result: dict[str, object] = queue.get(timeout=seconds + 60)
    worker.join()
    if pid:
        cpu = cpu_seconds(pid) - cpu0
        n = int(result["requests"])  # type: ignore[call-overload]
        result["server_cpu_us_per_request"] = round(cpu * 1e6 / n, 1) if n else None
        result["steal_share"] = steal_share_since(steal_at)
    return result


def write_config(path: Path, emulator_urls: list[str], engine: str = "emulator",
                 listen: dict[str, int] | None = None) -> None:
    """A one-pool gateway config in front of ``emulator_urls``.  ``engine="openai"`` for the neutral
    stub: it serves no real load metrics (its ``/metrics`` always says 0 running), and an engine
    that never shows it runs what it is sent keeps the adaptive limit at its initial 8, so 24 of
    32 connections would wait in the gateway's queue; a plain OpenAI server has no metrics, and the
    gateway then counts its own in-flight requests up to ``max_concurrency``, as a real engine that
    keeps up lets it.  ``listen``: settings of the config's ``listen`` (the poll windows)."""
    replicas = "\n".join(
        f'      - {{url: "{u}", engine: {engine}, max_concurrency: 1024}}' for u in emulator_urls
    )
    settings = ", ".join(f"{key}: {value}" for key, value in (listen or {}).items())
    path.write_text(
        f"""listen: {{{settings}}}
tenants:
  - name: bench
    key_sha256: {hash_key(KEY)}
    tiers: [turbo, standard, relax]
tiers:
  standard: {{capacity_share: 1.0, max_utilization: 1.0, queue_bound: 100000}}
pools:
  - name: bench
    models: [{MODEL}]
    replicas:
{replicas}
"""
    )


# ---- sim against bench (sim_fidelity.py, trace_fidelity.py) -----------------------------------------


def fidelity_gateway_yaml(tenant: str, key: str, model: str, urls: list[str], seqs: int, scrape_s: float) -> str:
    """One pool of emulators, each replica's limit held at its ``seqs``: the adaptive limit reacts
    to whether a scrape happens to catch a request between two engine steps, which would measure
    that rule's luck rather than the simulator (docs/sim.md, "Fidelity")."""
    return yaml.safe_dump({
        "tenants": [{"name": tenant, "key_sha256": hash_key(key), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "emu", "models": [model],
                   "replicas": [{"url": u, "engine": "emulator", "max_concurrency": seqs} for u in urls]}],
        "scrape": {"interval_s": scrape_s, "stale_after_s": 3.0, "timeout_s": 1.0},
        "concurrency": {"initial": seqs, "queue_tolerance": 1000},
        "health": {"interval_s": 0.5},
    }, sort_keys=False)


def fidelity_fleet(gpu: str, model: str, replicas: int, seqs: int, scrape_s: float) -> dict[str, Any]:
    """The fleet file that describes :func:`emulated_gateway`'s emulators to ``sim``."""
    return {"pools": [{"name": "emu", "replicas": [{"count": replicas, "gpu": gpu, "model": model,
                                                     "max_num_seqs": seqs}]}],
            "scrape": {"interval_s": scrape_s}}


@contextlib.contextmanager
def emulated_gateway(work: Path, gpu: str, model: str, replicas: int, seqs: int,
                     gateway_yaml: Callable[[list[str]], str]) -> Iterator[tuple[str, Path]]:
    """``replicas`` real-time emulators behind a gateway whose config ``gateway_yaml`` writes from
    their URLs: yields the gateway's URL and its config file, and stops every process after."""
    services: list[Service] = []
    try:
        for _ in range(replicas):
            services.append(start_emulator("--gpu", gpu, "--model", model, "--max-num-seqs", str(seqs),
                                           "--time-scale", "1", log_dir=work / "logs"))
        cfg_path = work / "gateway.yaml"
        cfg_path.write_text(gateway_yaml([s.url for s in services]))
        gw = start_gateway(cfg_path, log_dir=work / "logs")
        services.append(gw)
        yield gw.url, cfg_path
    finally:
        for svc in reversed(services):
            with contextlib.suppress(Exception):
                svc.stop()


def rel_err(sim: float | None, bench: float | None) -> float | None:
    """|sim − bench| ÷ bench; None when either is missing or bench is 0."""
    return None if sim is None or bench is None or bench == 0 else abs(sim - bench) / bench


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
