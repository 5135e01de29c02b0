"""A hung replica (issue 43, point 1): two real emulators behind a real gateway, one frozen with
SIGSTOP under an open-loop stream load, at each rate of ``--rates`` (5 and 40 req/s).

The emulators (L4, llama-3.1-8b, 32 sequences, 64-token prompts, 16-token answers, at
``--time-scale 0.2``) each complete about 105 req/s, so one alone carries 40 req/s below the
lower tiers' holdback lines (with 16 sequences it does not, and Relax waits for the tier policy,
not for the hung replica): what the freeze costs is the gateway's doing, not the fleet's size.
Per rate: ``--before`` seconds of load, then emulator 0 is frozen for ``--during`` seconds of
the same load; the gateway's ``/admin/state`` is read every 0.1 s.

Prints one JSON object, per rate: seconds from the freeze until the gateway stopped sending to
the frozen replica (its in-flight count last grew) and until it ejected it; requests lost that
had sent nothing to their client (any answer other than 200 or a shed with Retry-After; target
0) and streams cut off after their first byte; the healthy replica's dispatch slots not taken by
the frozen one's requests after the ejection (lowest seen) against its limit (target: equal);
and Relax p95 TTFT during the freeze against before it (target ≤ 2×).  The load average is
printed beside the figures: this machine's other work moves them.

    python benchmarks/hung_replica.py [--rates 5,40] [--before 20] [--during 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from turbogate.config import hash_key
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results.percentile import percentile

GPU, MODEL, SEQS, SCALE = "L4", "llama-3.1-8b", 32, 0.2
PROMPT, OUTPUT = 64, 16
KEY, ADMIN = "sk-hung", "hung-admin"
MIX = (("turbo", 0.1), ("standard", 0.6), ("relax", 0.3))
SHED = (429, 503)


p95 = partial(percentile, q=95)


class Load:
    """Open-loop Poisson streams; each request's send time, tier, status and TTFT."""

    def __init__(self, url: str) -> None:
        self.url = url + "/v1/chat/completions"
        self.records: list[tuple[float, str, str, float | None]] = []  # (sent, tier, outcome, ttft)
        self.tasks: set[asyncio.Task[None]] = set()

    async def one(self, session: aiohttp.ClientSession, tier: str) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x " * (PROMPT * 2)}],
                "max_tokens": OUTPUT, "ignore_eos": True, "stream": True, "service_tier": tier}
        start = time.perf_counter()
        ttft = None
        outcome = "200"
        try:
            async with session.post(self.url, json=body) as resp:
                if resp.status != 200:
                    await resp.read()
                    shed = resp.status in SHED and "Retry-After" in resp.headers
                    outcome = f"shed_{resp.status}" if shed else f"lost_{resp.status}"
                else:
                    async for line in resp.content:
                        if line.startswith(b"data: {"):
                            if b'"error"' in line:
                                outcome = "cut_mid_stream"
                            elif ttft is None:
                                ttft = time.perf_counter() - start
        except asyncio.CancelledError:
            outcome = "left_at_end"
            raise
        except aiohttp.ClientError as exc:
            outcome = "cut_mid_stream" if ttft is not None else f"lost_{type(exc).__name__}"
        finally:
            self.records.append((start, tier, outcome, ttft))

    async def poisson(self, session: aiohttp.ClientSession, rps: float, until: float, rng: random.Random) -> None:
        names, weights = zip(*MIX, strict=True)
        next_at = time.perf_counter()
        while next_at < until:
            next_at += rng.expovariate(rps)
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            task = asyncio.get_running_loop().create_task(self.one(session, rng.choices(names, weights)[0]))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)


async def watch_state(session: aiohttp.ClientSession, url: str, samples: list[tuple[float, dict[str, Any]]],
                      stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            async with session.get(url + "/admin/state", headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
                samples.append((time.perf_counter(), await resp.json()))
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)


def judge(samples: list[tuple[float, dict[str, Any]]], frozen: str, healthy: str, frozen_at: float) -> dict[str, Any]:
    """Stop-sending and eject times, and the healthy replica's usable slots after the ejection."""
    last_rise = None
    previous = 0
    ejected_at = None
    usable: list[int] = []
    limit = None
    for at, state in samples:
        if at < frozen_at:
            continue
        reps = {r["id"]: r for r in state["replicas"]}
        f, h = reps[frozen], reps[healthy]
        if ejected_at is None and f["in_flight"] > previous:
            last_rise = at
        previous = f["in_flight"]
        if ejected_at is None and f["health"] == "ejected":
            ejected_at = at
        if ejected_at is not None:
            pool = next(iter(state["pools"].values()))
            held_elsewhere = pool["in_flight"] - h["in_flight"]  # L1 places still held by the frozen one's requests
            usable.append(pool["slots"] - max(0, held_elsewhere))
            limit = int(h["limit"])
    return {"stop_sending_s": None if last_rise is None else round(last_rise - frozen_at, 2),
            "eject_s": None if ejected_at is None else round(ejected_at - frozen_at, 2),
            "healthy_slots_usable_after_eject": min(usable) if usable else None, "healthy_limit": limit}


async def run_rate(gw: Service, emus: list[Service], rps: float, before_s: float, during_s: float,
                   seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    samples: list[tuple[float, dict[str, Any]]] = []
    stop = asyncio.Event()
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, headers={"Authorization": f"Bearer {KEY}"},
                                     timeout=aiohttp.ClientTimeout(total=150)) as session:
        load = Load(gw.url)
        watcher = asyncio.get_running_loop().create_task(watch_state(session, gw.url, samples, stop))
        t0 = time.perf_counter()
        await load.poisson(session, rps, t0 + before_s, rng)
        frozen_at = time.perf_counter()
        os.kill(emus[0].process.pid, signal.SIGSTOP)
        try:
            await load.poisson(session, rps, frozen_at + during_s, rng)
            end = time.perf_counter()
            if load.tasks:  # the last requests get the time the gateway gives them, within 60 s
                await asyncio.wait(list(load.tasks), timeout=60)
            for task in list(load.tasks):
                task.cancel()
            await asyncio.gather(*load.tasks, return_exceptions=True)
        finally:
            os.kill(emus[0].process.pid, signal.SIGCONT)
            stop.set()
            await watcher
    during = [r for r in load.records if frozen_at <= r[0] < end]
    before = [r for r in load.records if t0 + 2.0 <= r[0] < frozen_at]  # the first 2 s warm the limits up
    held = [r for r in load.records if r[0] < frozen_at]
    outcomes = Counter(r[2] for r in load.records)
    relax_before = p95([r[3] for r in before if r[1] == "relax" and r[3] is not None])
    relax_during = p95([r[3] for r in during if r[1] == "relax" and r[3] is not None])
    lost = sum(v for k, v in outcomes.items() if k.startswith("lost_") or k == "left_at_end")
    out = {"rps": rps, "requests": len(load.records), "outcomes": dict(sorted(outcomes.items())),
           **judge(samples, emus[0].url, emus[1].url, frozen_at),
           "lost_nothing_sent": lost, "cut_mid_stream": outcomes.get("cut_mid_stream", 0),
           "sent_before_freeze": len(held),
           "relax_p95_ttft_before_s": relax_before, "relax_p95_ttft_during_s": relax_during,
           "relax_p95_ratio": (None if not relax_before or relax_during is None
                               else round(relax_during / relax_before, 2)),
           "max_ttft_during_s": max((r[3] for r in during if r[3] is not None), default=None)}
    out["pass"] = {"lost_0": lost == 0, "ejected": out["eject_s"] is not None,
                   "full_limit": out["healthy_slots_usable_after_eject"] is not None
                   and out["healthy_slots_usable_after_eject"] >= (out["healthy_limit"] or 0),
                   "relax_within_2x": out["relax_p95_ratio"] is not None and out["relax_p95_ratio"] <= 2.0}
    return out


def one_rate(rps: float, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    emus = [start_emulator("--gpu", GPU, "--model", MODEL, "--max-num-seqs", str(SEQS), "--time-scale", str(SCALE),
                           log_dir=folder) for _ in range(2)]
    config = {"admin": {"token_sha256": hash_key(ADMIN)},
              "tenants": [{"name": "hung", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
              "pools": [{"name": "main", "models": [MODEL],
                         "replicas": [{"url": e.url, "engine": "emulator", "max_num_seqs": SEQS} for e in emus]}]}
    path = folder / f"gateway-{rps:g}.yaml"
    path.write_text(yaml.safe_dump(config))
    try:
        with start_gateway(path, "--log-level", "warning", log_dir=folder) as gw:
            print(f"rate {rps:g} req/s: {args.before:g} s of load, then replica 0 frozen for {args.during:g} s",
                  file=sys.stderr, flush=True)
            return asyncio.run(run_rate(gw, emus, rps, args.before, args.during, args.seed))
    finally:
        for e in emus:
            e.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="5,40", help="comma list of offered loads, req/s")
    ap.add_argument("--before", type=float, default=20.0, help="seconds of load before the freeze")
    ap.add_argument("--during", type=float, default=40.0, help="seconds of load while frozen")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [one_rate(float(r), args, Path(tmp)) for r in args.rates.split(",") if r]
    print(json.dumps({"loadavg": Path("/proc/loadavg").read_text().split()[:3], "time_scale": SCALE,
                      "rates": results, "pass": all(all(r["pass"].values()) for r in results)}))


if __name__ == "__main__":
    main()
