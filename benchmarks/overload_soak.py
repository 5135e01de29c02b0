"""Overload soak (issue 12): 10× the fleet's capacity with a Turbo / Standard / Relax mix.

Two real emulators (the turbo_isolation setup: L4, llama-3.1-8b, 16 sequences, --time-scale 0.2)
behind a real gateway with the default tier policy.  First Turbo alone at 0.2× capacity (the
unloaded TTFT), then open-loop Poisson arrivals at ``--factor`` × capacity for ``--seconds``
(60 in CI-size runs, 600 by hand), then the load stops (every outstanding client leaves) and
the gateway must come back: queues empty and a Turbo request served within 2× its unloaded TTFT.

Then the burst question (issue 43): a mixed load at ``--base-load`` × capacity, a 10× burst
for ``--burst-seconds`` whose clients stay (they wait, as real ones do), and the mixed load
again for ``--after-seconds``, every request sent at its place in one seeded schedule
(``soak_measure.real_schedule``).  For each tier, the seconds from the burst's end until the p95
TTFT of its requests, in every 4-s window of send times from then on, is back within 2× of
before the burst (a shed or an unanswered request counts as too slow), and until the first such
window.  Target: ≤ 10 s for Turbo and Standard.

A steady load has slow windows too, with no burst at all: a clump of arrivals (seven Standard
requests in 0.3 s) waits a prefill or two, and a 4-s window's p95 is nearly its slowest request.
So the run then sends the same schedule again without the burst's requests (the control,
``--no-control`` leaves it out), and beside the strict recovery the JSON gives
``recovery_beyond_steady_s``: until every later window is within, or the control has a slow
window at the same moment (within 1 s: the same arrivals' own clump, not the burst's backlog);
and the slow stretches of both (``slow_after_back_s``, ``slow_without_burst_s``), the share of
slow windows in each, and the definitions (``recovery_definition``, ``soak_measure.py``).

Prints one JSON object: the gateway's RSS at start, peak and end (MB); counts by tier and status;
sheds without ``Retry-After`` (must be 0); Turbo p95 TTFT loaded and unloaded (Turbo is 5 % of
the load: half the capacity at 10×); Relax completions
(never starved to zero); the recovery time; the burst's per-tier recovery (``burst``); and
pass/fail for the acceptance bounds (peak RSS under 2× start + 50 MB, every shed with
Retry-After, recovery within 5 s, Turbo and Standard back within 10 s of the burst's end).

    python benchmarks/overload_soak.py [--seconds 60] [--factor 10] [--burst-seconds 30] [--after-seconds 60]
    python benchmarks/overload_soak.py --simulate 1,2,3   # the burst question in virtual time, per seed
    python benchmarks/overload_soak.py --replay 1,2,3     # the real run's own schedule in virtual time

``--simulate`` and ``--replay`` run the burst question in the simulator instead
(``soak_virtual.py``): over the gateway's own core with the same config, the engines ``1 /
SCALE`` times faster than the perf model's, so virtual seconds are the real run's wall seconds.
``--simulate`` draws per ``--fleet`` (``2xL4`` is the real run's; ``4xL4s8``: four replicas of
8 sequences) and ``--mix`` (``issue``: the real run's tier mixes; ``std``: a Standard-heavier
mixed load and twice the burst's Relax share); ``--replay`` sends the real run's own schedule.

All traffic stays on 127.0.0.1; the client keeps at most ``--max-open`` requests open.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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
from soak_measure import KEY, MIX, Sent, burst_figures, p95, real_schedule
from soak_virtual import SIM_FLEETS, SIM_MIXES, replayed, simulated
from turbo_isolation import GPU, MODEL, OUTPUT, PROMPT, SCALE, SEQS, capacity_rps
from turbogate.config import hash_key
from turbogate.procs import Service, start_emulator, start_gateway

ADMIN = "soak-admin"
SHED = (429, 503)


class Load:
    def __init__(self, url: str, max_open: int) -> None:
        self.url = url + "/v1/chat/completions"
        self.open = asyncio.Semaphore(max_open)
        self.counts: Counter[str] = Counter()
        self.no_retry_after = 0
        self.ttft: dict[str, list[float]] = {t: [] for t, _ in MIX}
        self.tasks: set[asyncio.Task[None]] = set()
        self.sent: Sent = []  # (send time, tier, TTFT; inf: shed or no first token)
        self.unanswered: Counter[str] = Counter()  # per tier: sent, no first token or refusal yet

    async def one(self, session: aiohttp.ClientSession, tier: str) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x " * (PROMPT * 2)}],
                "max_tokens": OUTPUT, "ignore_eos": True, "stream": True, "service_tier": tier}
        start = time.perf_counter()
        ttft = math.inf
        answered = False
        self.unanswered[tier] += 1
        async with self.open:
            try:
                async with session.post(self.url, json=body) as resp:
                    if resp.status != 200:
                        self.unanswered[tier] -= 1
                        answered = True
                        await resp.read()
                        self.counts[f"{tier}:{resp.status}"] += 1
                        if resp.status in SHED and "Retry-After" not in resp.headers:
                            self.no_retry_after += 1
                        return
                    first = True
                    async for line in resp.content:
                        if first and line.startswith(b"data: {"):
                            ttft = time.perf_counter() - start
                            self.ttft[tier].append(ttft)
                            self.unanswered[tier] -= 1
                            answered, first = True, False
                    self.counts[f"{tier}:200"] += 1
            except asyncio.CancelledError:
                self.counts[f"{tier}:left_at_stop"] += 1
                raise
            except aiohttp.ClientError as exc:
                self.counts[f"{tier}:{type(exc).__name__}"] += 1
            finally:
                if not answered:
                    self.unanswered[tier] -= 1
                self.sent.append((start, tier, ttft))

    def start(self, session: aiohttp.ClientSession, tier: str) -> None:
        task = asyncio.get_running_loop().create_task(self.one(session, tier))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def poisson(self, session: aiohttp.ClientSession, rps: float, seconds: float,
                      tiers: tuple[tuple[str, float], ...], rng: random.Random) -> None:
        names, weights = zip(*tiers, strict=True)
        end = time.perf_counter() + seconds
        next_at = time.perf_counter()
        while next_at < end:
            next_at += rng.expovariate(rps)
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            self.start(session, rng.choices(names, weights)[0])

    async def planned(self, session: aiohttp.ClientSession, plan: list[tuple[float, str]]) -> float:
        """Send each (offset, tier) of ``plan`` at its offset from now; returns when that was."""
        t0 = time.perf_counter()
        for at, tier in plan:
            await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
            self.start(session, tier)
        return t0

    async def answered(self, tiers: tuple[str, ...], seconds: float) -> None:
        """Until every request of ``tiers`` sent so far has its first token or its refusal, or for
        ``seconds`` at most: stopping at once would count the last ones sent as unanswered."""
        deadline = time.perf_counter() + seconds
        while any(self.unanswered[t] for t in tiers) and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)

    async def stop(self) -> int:
        left = len(self.tasks)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        return left


async def idle(session: aiohttp.ClientSession, gw: str) -> bool:
    async with session.get(gw + "/admin/state", headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
        state = await resp.json()
    return all(p["in_flight"] == 0 and all(q["queued"] == 0 for q in p["queues"].values())
               for p in state["pools"].values())


async def turbo_ttft(session: aiohttp.ClientSession, gw: str) -> float | None:
    probe = Load(gw, 1)
    await probe.one(session, "turbo")
    return probe.ttft["turbo"][0] if probe.ttft["turbo"] else None


async def soak(gw: Service, seconds: float, factor: float, max_open: int, seed: int,
               baseline_s: float) -> dict[str, Any]:
    cap = capacity_rps()
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {KEY}"}
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        base = Load(gw.url, max_open)
        await base.poisson(session, 0.2 * cap, baseline_s, (("turbo", 1.0),), rng)
        await asyncio.gather(*base.tasks, return_exceptions=True)
        unloaded = p95(base.ttft["turbo"])
        rss_start = rss_mb(gw.process.pid)
        peak = rss_start
        load = Load(gw.url, max_open)

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, rss_mb(gw.process.pid))
                await asyncio.sleep(0.5)

        sampler = asyncio.get_running_loop().create_task(sample())
        await load.poisson(session, factor * cap, seconds, MIX, rng)
        stopped = time.perf_counter()
        left = await load.stop()
        recovered_at = None
        limit = None if unloaded is None else 2 * unloaded
        while time.perf_counter() - stopped < 60:
            if await idle(session, gw.url):
                ttft = await turbo_ttft(session, gw.url)
                if ttft is not None and (limit is None or ttft <= limit):
                    recovered_at = time.perf_counter()
                    break
            await asyncio.sleep(0.1)
        sampler.cancel()
        rss_end = rss_mb(gw.process.pid)
    statuses = dict(sorted(load.counts.items()))
    codes = {k: k.split(":")[1] for k in load.counts}
    shed = sum(v for k, v in load.counts.items() if codes[k].isdigit() and int(codes[k]) in SHED)
    recovery = None if recovered_at is None else round(recovered_at - stopped, 2)
    turbo_loaded = p95(load.ttft["turbo"])
    return {
        "seconds": seconds, "capacity_rps": round(cap, 2), "offered_rps": round(factor * cap, 2),
        "rss_mb": {"start": round(rss_start, 1), "peak": round(peak, 1), "end": round(rss_end, 1)},
        "statuses": statuses, "shed": shed, "shed_without_retry_after": load.no_retry_after,
        "turbo_p95_ttft_unloaded_s": unloaded, "turbo_p95_ttft_loaded_s": turbo_loaded,
        "turbo_p95_ttft_ratio": None if not unloaded or turbo_loaded is None else round(turbo_loaded / unloaded, 2),
        "relax_completed": load.counts.get("relax:200", 0), "outstanding_at_stop": left,
        "recovery_s": recovery,
        "pass": {"memory_bounded": peak < 2 * rss_start + 50, "retry_after_on_every_shed": load.no_retry_after == 0,
                 "relax_not_starved": load.counts.get("relax:200", 0) > 0,
                 "recovered_within_5s": recovery is not None and recovery <= 5.0},
    }



async def until_idle(session: aiohttp.ClientSession, gw: str, seconds: float) -> bool:
    """Poll the gateway until nothing is queued or in flight, for ``seconds`` at most."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if await idle(session, gw):
            return True
        await asyncio.sleep(0.2)
    return False


async def burst(gw: Service, cap: float, base_load: float, factor: float, base_s: float, burst_s: float,
                after_s: float, max_open: int, seed: int, control: bool) -> dict[str, Any]:
    """The burst question (see the module docstring): the seeded schedule with the burst, then, with
    ``control``, the same schedule without the burst's requests once the gateway is idle again.
    Times are the schedule's (seconds from its first send), so both runs' windows line up."""
    plan, started, ended = real_schedule(seed, base_load * cap, factor * cap, base_s, burst_s, after_s)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, headers={"Authorization": f"Bearer {KEY}"},
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:

        async def run(requests: list[tuple[float, str]]) -> Sent:
            load = Load(gw.url, max_open)
            t0 = await load.planned(session, requests)
            await load.answered(("turbo", "standard"), 10.0)
            await load.stop()
            return [(at - t0, tier, ttft) for at, tier, ttft in load.sent]

        sent = await run([(t, tier) for t, tier, _ in plan])
        steady = None
        if control:
            await until_idle(session, gw.url, 120.0)
            steady = await run([(t, tier) for t, tier, bursting in plan if not bursting])
    return {"base_rps": round(base_load * cap, 2), "burst_rps": round(factor * cap, 2), "burst_s": burst_s,
            "control": control, **burst_figures(sent, started, ended, plan[-1][0], steady)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--factor", type=float, default=10.0, help="offered load ÷ the fleet's capacity")
    ap.add_argument("--max-open", type=int, default=6000, help="most requests the client keeps open")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline-seconds", type=float, default=15.0, help="Turbo alone at 0.2× capacity first")
    ap.add_argument("--burst-seconds", type=float, default=30.0, help="the 10× burst of the burst question")
    ap.add_argument("--after-seconds", type=float, default=60.0, help="mixed load after the burst, to watch recovery")
    ap.add_argument("--base-load", type=float, default=0.5, help="mixed load before and after the burst, × capacity")
    ap.add_argument("--no-control", action="store_true",
                    help="leave out the control run (the same schedule without the burst) after the burst")
    ap.add_argument("--simulate", default=None, metavar="SEEDS",
                    help="comma-separated seeds: the burst question in the simulator instead (one JSON object each)")
    ap.add_argument("--fleet", default="2xL4", help=f"with --simulate, comma-separated: {', '.join(SIM_FLEETS)}")
    ap.add_argument("--mix", default="issue", help=f"with --simulate, comma-separated: {', '.join(SIM_MIXES)}")
    ap.add_argument("--replay", default=None, metavar="SEEDS",
                    help="comma-separated seeds: the real run's own schedule for each in the simulator (2xL4)")
    args = ap.parse_args()
    if args.replay:
        for seed in (int(s) for s in args.replay.split(",") if s):
            print(json.dumps(replayed(seed, args.base_load, args.factor, args.baseline_seconds, args.burst_seconds,
                                      args.after_seconds)), flush=True)
        return
    if args.simulate:
        for fleet in args.fleet.split(","):
            for mix in args.mix.split(","):
                for seed in (int(s) for s in args.simulate.split(",") if s):
                    print(json.dumps(simulated(seed, fleet, mix, args.base_load, args.factor, args.baseline_seconds,
                                               args.burst_seconds, args.after_seconds)), flush=True)
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        emus = [start_emulator("--gpu", GPU, "--model", MODEL, "--max-num-seqs", str(SEQS),
                               "--time-scale", str(SCALE), log_dir=folder) for _ in range(2)]
        config = {"admin": {"token_sha256": hash_key(ADMIN)},
                  "tenants": [{"name": "soak", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
                  "pools": [{"name": "main", "models": [MODEL],
                             "replicas": [{"url": e.url, "engine": "emulator"} for e in emus]}]}
        path = folder / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        try:
            with start_gateway(path, "--log-level", "warning", log_dir=folder) as gw:
                out = asyncio.run(soak(gw, args.seconds, args.factor, args.max_open, args.seed,
                                     args.baseline_seconds))
                if args.burst_seconds > 0:
                    out["burst"] = asyncio.run(burst(gw, capacity_rps(), args.base_load, args.factor,
                                                     args.baseline_seconds, args.burst_seconds, args.after_seconds,
                                                     args.max_open, args.seed, not args.no_control))
                    out["pass"].update(out["burst"]["pass"])
        finally:
            for e in emus:
                e.stop()
    out["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
