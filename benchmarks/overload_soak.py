"""Overload soak (issue 12): 10× the fleet's capacity with a Turbo / Standard / Relax mix.

Two real emulators (the turbo_isolation setup: L4, llama-3.1-8b, 16 sequences, --time-scale 0.2)
behind a real gateway with the default tier policy.  First Turbo alone at 0.2× capacity (the
unloaded TTFT), then open-loop Poisson arrivals at ``--factor`` × capacity for ``--seconds``
(60 in CI-size runs, 600 by hand), then the load stops (every outstanding client leaves) and
the gateway must come back: queues empty and a Turbo request served within 2× its unloaded TTFT.

Then the burst question (issue 43): a mixed load at ``--base-load`` × capacity, a 10× burst
for ``--burst-seconds`` whose clients stay (they wait, as real ones do), and the mixed load
again for ``--after-seconds``: for each tier, the seconds from the burst's end until the p95
TTFT of its requests, in every 4-s window of send times from then on, is back within 2× of
before the burst (a shed or an unanswered request counts as too slow), and until the first such
window (a noisy machine puts a slow window in late: the two apart say which it was), with the
slow stretches after that first window per tier (``slow_after_back_s``: a stretch every tier has
at the same time is the machine's).  Target: ≤ 10 s for Turbo and Standard.  A steady load has
slow windows too, with no burst at all (a clump of arrivals; a few per cent of windows in some
simulated seeds), so beside that strict recovery the JSON gives the share of windows after the
first one back that are slow (``slow_share_after_back``) and the share a steady load has
(``slow_share_steady``: with ``--simulate`` the same arrivals run again without the burst, over
the same span; in a real run the windows before the burst), and ``back_within_10s_at_steady_rate``:
the first window back within 10 s, later ones slow no more often than steady.  The JSON states
the definitions (``recovery_definition``).

Prints one JSON object: the gateway's RSS at start, peak and end (MB); counts by tier and status;
sheds without ``Retry-After`` (must be 0); Turbo p95 TTFT loaded and unloaded (Turbo is 5 % of
the load: half the capacity at 10×); Relax completions
(never starved to zero); the recovery time; the burst's per-tier recovery (``burst``); and
pass/fail for the acceptance bounds (peak RSS under 2× start + 50 MB, every shed with
Retry-After, recovery within 5 s, Turbo and Standard back within 10 s of the burst's end).

    python benchmarks/overload_soak.py [--seconds 60] [--factor 10] [--burst-seconds 30] [--after-seconds 60]
    python benchmarks/overload_soak.py --simulate 1,2,3   # the burst question in virtual time, per seed
    python benchmarks/overload_soak.py --replay 1,2,3     # the real run's own schedule in virtual time

``--simulate`` runs the burst question in the simulator instead (no processes, seconds a seed),
over the gateway's own core with the same config: each replica's engine runs ``1 / SCALE`` times
faster than the perf model's (the emulator's ``--time-scale``), so virtual seconds are the real
run's wall seconds and the gateway's objectives, budgets and windows mean the same.  One JSON
object per seed and ``--fleet`` (``2xL4`` is the real run's; ``4xL4s8``: four replicas of 8
sequences) and ``--mix`` (``issue``: the real run's tier mixes; ``std``: a Standard-heavier
mixed load and twice the burst's Relax share), with the same figures as the real run's
``burst``.  Before the burst, as the real run's soak does, an overload (2× for 20 s) teaches the
gateway its replicas' limits and the mixed load follows until the backlog it left is gone.

``--replay SEEDS`` runs, in the same way on the real run's fleet, the schedule the real run sends
with each seed (``real_schedule``: the same generator and draws, the burst's and the mixed load's
loops interleaved as the event loop wakes them), so a slow stretch of a real run can be told apart:
the machine's, or the schedule's (seed 1: twelve Turbo arrivals in 0.86 s, 48.6 s after the burst).

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
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from common import rss_mb
from turbo_isolation import GPU, MODEL, OUTPUT, PROMPT, SCALE, SEQS, capacity_rps
from turbogate.config import hash_key, parse_config
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results.percentile import percentile

KEY, ADMIN = "sk-soak", "soak-admin"
#: Turbo is 5 % of the offered load: half the fleet's capacity at 10×, so Turbo alone fits and
#: its TTFT is a fair question; Standard and Relax bring the excess.
MIX = (("turbo", 0.05), ("standard", 0.75), ("relax", 0.2))
SHED = (429, 503)
#: The mixed load before and after the burst: enough Turbo to measure a p95 in each window.
BASE_MIX = (("turbo", 0.3), ("standard", 0.5), ("relax", 0.2))
WINDOW_S, STEP_S = 4.0, 0.5  # recovery windows of send times, and how far apart they start


p95 = partial(percentile, q=95)


class Load:
    def __init__(self, url: str, max_open: int) -> None:
        self.url = url + "/v1/chat/completions"
        self.open = asyncio.Semaphore(max_open)
        self.counts: Counter[str] = Counter()
        self.no_retry_after = 0
        self.ttft: dict[str, list[float]] = {t: [] for t, _ in MIX}
        self.tasks: set[asyncio.Task[None]] = set()
        self.sent: list[tuple[float, str, float]] = []  # (send time, tier, TTFT; inf: shed or no first token)

    async def one(self, session: aiohttp.ClientSession, tier: str) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x " * (PROMPT * 2)}],
                "max_tokens": OUTPUT, "ignore_eos": True, "stream": True, "service_tier": tier}
        start = time.perf_counter()
        ttft = math.inf
        async with self.open:
            try:
                async with session.post(self.url, json=body) as resp:
                    if resp.status != 200:
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
                            first = False
                    self.counts[f"{tier}:200"] += 1
            except asyncio.CancelledError:
                self.counts[f"{tier}:left_at_stop"] += 1
                raise
            except aiohttp.ClientError as exc:
                self.counts[f"{tier}:{type(exc).__name__}"] += 1
            finally:
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


def window_verdicts(sent: list[tuple[float, str, float]], tier: str, start: float, until: float,
                    limit: float) -> list[tuple[float, bool]]:
    """``tier``'s 4-s windows of send times from ``start``, ``STEP_S`` apart, that end by ``until``:
    (window start, its p95 TTFT within ``limit``; a window with no request is within)."""
    mine = [(at, ttft) for at, t, ttft in sent if t == tier and start <= at < until]
    starts = [start + k * STEP_S for k in range(int((until - start - WINDOW_S) / STEP_S) + 1)]
    verdicts = []
    for s in starts:
        window = [ttft for at, ttft in mine if s <= at < s + WINDOW_S]
        verdicts.append((s, not window or (p95(window) or math.inf) <= limit))
    return verdicts


def slow_share(verdicts: list[tuple[float, bool]]) -> float | None:
    """The share of ``verdicts``' windows over their limit (None: no window)."""
    return round(sum(1 for _, ok in verdicts if not ok) / len(verdicts), 3) if verdicts else None


def recovery_s(sent: list[tuple[float, str, float]], tier: str, burst_end: float, until: float,
               limit: float) -> tuple[float | None, float | None, list[list[float]], float | None]:
    """Seconds from ``burst_end`` until every window of ``tier``'s send times from then on has a
    p95 TTFT within ``limit``, and until the first such window (None: not within ``until``); the
    slow stretches after that first one ([from, to] window starts, seconds after the burst): one
    that every tier shares at the same time is the machine's, not a tier's; and the share of the
    windows after the first one back that are slow (``slow_share``), to set beside the share a
    steady load without a burst has (``burst_figures``)."""
    verdicts = window_verdicts(sent, tier, burst_end, until, limit)
    good = [ok for _, ok in verdicts]
    first_i = next((i for i, ok in enumerate(good) if ok), None)
    first = None if first_i is None else round(verdicts[first_i][0] - burst_end, 2)
    slow: list[list[float]] = []
    if first_i is not None:
        for i in range(first_i + 1, len(verdicts)):
            if good[i]:
                continue
            at = round(verdicts[i][0] - burst_end, 2)
            if slow and not good[i - 1]:
                slow[-1][1] = at
            else:
                slow.append([at, at])
    later = None if first_i is None else slow_share(verdicts[first_i + 1:])
    for i in range(len(verdicts)):
        if all(good[i:]):
            return round(verdicts[i][0] - burst_end, 2), first, slow, later
    return None, first, slow, later


async def burst(gw: Service, cap: float, base_load: float, factor: float, base_s: float, burst_s: float,
                after_s: float, max_open: int, seed: int) -> dict[str, Any]:
    """The burst question (see the module docstring)."""
    rng = random.Random(seed + 1)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, headers={"Authorization": f"Bearer {KEY}"},
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        load = Load(gw.url, max_open)
        await load.poisson(session, base_load * cap, base_s, BASE_MIX, rng)
        started = time.perf_counter()
        bursting = asyncio.get_running_loop().create_task(load.poisson(session, factor * cap, burst_s, MIX, rng))
        await load.poisson(session, base_load * cap, burst_s, BASE_MIX, rng)  # the usual load goes on beside it
        await bursting
        ended = time.perf_counter()
        await load.poisson(session, base_load * cap, after_s, BASE_MIX, rng)
        until = time.perf_counter()
        await load.stop()
    return {"base_rps": round(base_load * cap, 2), "burst_rps": round(factor * cap, 2), "burst_s": burst_s,
            **burst_figures(load.sent, started, ended, until)}


#: What the burst's JSON calls recovered (``burst_figures``), stated in it.
RECOVERY_DEFINITION = (
    "windows: p95 TTFT of a tier's requests sent in each 4-s window, windows 0.5 s apart, against 2x the "
    "tier's p95 before the burst (a shed or unanswered request is too slow). recovery_s: from the burst's "
    "end until every later window is within (strict). first_window_back_s: until the first window within. "
    "slow_share_after_back: the share of windows after that first one that are not within; "
    "slow_share_steady: the same share with no burst at all (simulated: the same arrivals without the "
    "burst, over the same span; real: the windows before the burst, slow_share_before_burst). "
    "back_within_10s_at_steady_rate: the first window back within 10 s and later windows slow no more often "
    "than the steady share. slow_without_burst_s (with a run without the burst): that run's slow stretches, "
    "as slow_after_back_s, to set beside them.")


def burst_figures(sent: list[tuple[float, str, float]], started: float, ended: float, until: float,
                  steady: list[tuple[float, str, float]] | None = None) -> dict[str, Any]:
    """Per tier: p95 TTFT before the burst, the recovery, the first window back and the slow
    stretches after it (``recovery_s``), and pass/fail against the 10-s target; and how often a
    window is slow with no burst at all (``RECOVERY_DEFINITION``): over ``steady``'s requests from
    ``ended`` to ``until`` (the same load without the burst), else over the windows before it."""
    before = {t: p95([ttft for at, tier, ttft in sent if tier == t and at < started]) for t, _ in BASE_MIX}
    first_at = min((at for at, _, _ in sent), default=started)
    recovery: dict[str, float | None] = {}
    first_back: dict[str, float | None] = {}
    slow_after: dict[str, list[list[float]]] = {}
    share_after: dict[str, float | None] = {}
    share_before: dict[str, float | None] = {}
    share_steady: dict[str, float | None] = {}
    slow_steady: dict[str, list[list[float]]] = {}
    for t, _ in BASE_MIX:
        base = before[t]
        if base is None:
            recovery[t], first_back[t], slow_after[t], share_after[t] = None, None, [], None
            share_before[t] = share_steady[t] = None
            continue
        recovery[t], first_back[t], slow_after[t], share_after[t] = recovery_s(sent, t, ended, until, 2 * base)
        share_before[t] = slow_share(window_verdicts(sent, t, first_at, started, 2 * base))
        share_steady[t] = (share_before[t] if steady is None
                           else slow_share(window_verdicts(steady, t, ended, until, 2 * base)))
        if steady is not None:  # when the run without the burst is slow: the schedule's own clumps
            slow_steady[t] = recovery_s(steady, t, ended, until, 2 * base)[2]
    at_steady = {t: _within(first_back[t], 10.0) and share_after[t] is not None and share_steady[t] is not None
                 and share_after[t] <= share_steady[t] for t in ("turbo", "standard")}  # type: ignore[operator]
    return {"p95_ttft_before_s": {t: None if v is None else round(v, 4) for t, v in before.items()},
            "recovery_s": recovery, "first_window_back_s": first_back, "slow_after_back_s": slow_after,
            "slow_share_after_back": share_after, "slow_share_steady": share_steady,
            **({"slow_without_burst_s": slow_steady} if steady is not None else {}),
            "slow_share_before_burst": share_before,
            "steady_from": "no_burst_run" if steady is not None else "before_burst",
            "window_s": WINDOW_S, "recovery_definition": RECOVERY_DEFINITION,
            "pass": {**{f"{t}_within_10s": _within(recovery[t], 10.0) for t in ("turbo", "standard")},
                     **{f"{t}_back_within_10s_at_steady_rate": at_steady[t] for t in ("turbo", "standard")}}}


def _within(value: float | None, bound: float) -> bool:
    return value is not None and value <= bound


#: The simulated fleets (replicas, sequences each) and tier mixes (the burst's, the mixed load's),
#: fixed before any tuning.
SIM_FLEETS = {"2xL4": (2, SEQS), "4xL4s8": (4, 8)}
SIM_MIXES = {"issue": (MIX, BASE_MIX),
             "std": ((("turbo", 0.05), ("standard", 0.55), ("relax", 0.4)),
                     (("turbo", 0.15), ("standard", 0.65), ("relax", 0.2)))}


def _mix_text(mix: tuple[tuple[str, float], ...]) -> str:
    return ",".join(f"{t}={w}" for t, w in mix)


def _faster(dep: Any, k: float) -> Any:
    """``dep`` with every step ``k`` times shorter (the emulator's ``--time-scale`` 1/k): compute,
    bandwidth and host overheads alike; memory, hence the KV cache, unchanged."""
    from dataclasses import replace

    gpu, f = dep.gpu, dep.factors
    gpu = replace(gpu, hbm_bandwidth=k * gpu.hbm_bandwidth, bf16_flops=k * gpu.bf16_flops,
                  fp8_flops=None if gpu.fp8_flops is None else k * gpu.fp8_flops,
                  link_bandwidth=k * gpu.link_bandwidth)
    f = replace(f, step_overhead_s=f.step_overhead_s / k, per_seq_overhead_s=f.per_seq_overhead_s / k,
                tp_allreduce_s=f.tp_allreduce_s / k, frontend_s=f.frontend_s / k,
                frontend_per_token_s=f.frontend_per_token_s / k, tp_allreduce_growth_s=f.tp_allreduce_growth_s / k,
                decode_allreduce_s=None if f.decode_allreduce_s is None else f.decode_allreduce_s / k)
    return replace(dep, gpu=gpu, factors=f)


Segments = list[tuple[float, float, float, tuple[tuple[str, float], ...]]]


def sim_sent(replicas: int, seqs: int, segments: Segments, warmup: Segments, seed: int,
             probe: Any = None, skip: frozenset[int] = frozenset(),
             schedule: list[tuple[float, str]] | None = None) -> list[tuple[float, str, float]]:
    """Run ``segments`` ((start, seconds, rate, mix), rates in wall requests/s) through the
    gateway's core on ``replicas`` faster engines in virtual time, after the unrecorded
    ``warmup`` segments: (send time, tier, TTFT; inf: shed or no first token) per request, as
    ``Load.sent``.  ``probe(sim)``: called before the run.  ``skip``: indices of segments left
    out, the others' arrivals unchanged (each segment draws its own).  ``schedule``: (send time,
    tier) of every request instead of the segments' draws (``real_schedule``)."""
    from turbogate.bench.options import build_load
    from turbogate.configpolicy import flow_policy
    from turbogate.engine import Engine, EngineLoop
    from turbogate.sched.flow import Flow
    from turbogate.sim.build import SimConfig, build_replicas
    from turbogate.sim.core import Simulation
    from turbogate.sim.fleet import parse_fleet
    from turbogate.sim.requests import RequestSource

    gateway = parse_config({
        "tenants": [{"name": "soak", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "main", "models": [MODEL], "replicas": [{"url": f"http://r{i}"} for i in range(replicas)]}],
    })
    fleet = parse_fleet({"pools": [{"name": "main", "replicas": [
        {"count": replicas, "gpu": GPU, "model": MODEL, "max_num_seqs": seqs}]}]})

    def load(rate: float, seconds: float, mix: tuple[tuple[str, float], ...], part: int) -> Any:
        return build_load(shape="constant", qps=rate, qps_start=None, qps_end=None, steps=1, duration=seconds,
                          arrivals="poisson", burstiness=1.0, prompt_tokens=str(PROMPT), output_tokens=str(OUTPUT),
                          dataset=None, no_seed=False, tiers=_mix_text(mix), n_api_keys=1,
                          random_seed=seed * 1000 + part, slo=None, knee_method="throughput", knee_k=2.0,
                          knee_metric="e2e", fleet_cost=1.0, tier_cost=None)

    def requests(parts: Segments, offset: int) -> list[Any]:
        merged = sorted((start + r.t, part, r) for part, (start, seconds, rate, mix) in enumerate(parts)
                        if offset or part not in skip for r in RequestSource(load(rate, seconds, mix, offset + part)))
        return [r._replace(id=i, t=t, step=0) for i, (t, _, r) in enumerate(merged)]

    if schedule is not None:
        like = next(iter(RequestSource(load(1.0, 10.0, BASE_MIX, 0))))
        recorded = [like._replace(id=i, t=t, step=0, tier=tier) for i, (t, tier) in enumerate(schedule)]
    else:
        recorded = requests(segments, 0)
    warm = [r._replace(id=-1 - r.id) for r in requests(warmup, 100)]
    warmup_s = max(start + seconds for start, seconds, _, _ in warmup)
    first = segments[0]
    sc = SimConfig(gateway=gateway, fleet=fleet, load=load(first[2], first[1], first[3], 0))
    reps, specs = build_replicas(sc)
    for rep in reps:
        rep.deployment = _faster(rep.deployment, 1.0 / SCALE)
        rep.loop = EngineLoop(Engine(rep.deployment, rep.config))
    flow = Flow(flow_policy(gateway, pools=specs, mode="turbogate"))
    sim = Simulation(flow, reps, recorded, model=MODEL, tenants=["soak"],
                     scrape_interval_s=gateway.scrape.interval_s, warmup=warm, warmup_s=warmup_s)
    if probe is not None:
        probe(sim)
    return [(r.scheduled_s, str(r.tier_asked), r.ttft_s if r.ok and r.ttft_s is not None else math.inf)
            for r in sim.run() if r.id >= 0]


def simulated(seed: int, fleet: str, mix: str, base_load: float, factor: float, base_s: float, burst_s: float,
              after_s: float) -> dict[str, Any]:
    """The burst question for one seed in virtual time (see the module docstring)."""
    replicas, seqs = SIM_FLEETS[fleet]
    cap = capacity_rps(replicas, seqs)
    burst_mix, base_mix = SIM_MIXES[mix]
    segments: Segments = [(0.0, base_s, base_load * cap, base_mix), (base_s, burst_s, factor * cap, burst_mix),
                (base_s, burst_s, base_load * cap, base_mix), (base_s + burst_s, after_s, base_load * cap, base_mix)]
    # As the real run's soak before its burst: an overload teaches the gateway its replicas'
    # limits, then the mixed load until the backlog it left is gone (Relax's waits out its minute).
    warmup: Segments = [(0.0, 20.0, 2 * cap, burst_mix), (20.0, 70.0, base_load * cap, base_mix)]
    sent = sim_sent(replicas, seqs, segments, warmup, seed)
    steady = sim_sent(replicas, seqs, segments, warmup, seed, skip=frozenset({1}))  # the same, no burst
    return {"seed": seed, "fleet": fleet, "mix": mix, "base_rps": round(base_load * cap, 2),
            "burst_rps": round(factor * cap, 2), "burst_s": burst_s,
            **burst_figures(sent, base_s, base_s + burst_s, base_s + burst_s + after_s, steady)}


Loop = tuple[float, float, tuple[tuple[str, float], ...], bool]  # next send time, rate, mix, the burst's


def real_schedule(seed: int, base_rps: float, burst_rps: float, base_s: float, burst_s: float,
                  after_s: float) -> tuple[list[tuple[float, str, bool]], float, float]:
    """The requests ``burst`` sends with ``seed``, as (send time, tier, part of the burst), and
    when the burst starts and ends: the same draws from the same generator as ``Load.poisson``,
    in the order its event loop makes them (each wake draws its tier, then the next gap; beside
    the burst, the mixed load's loop draws its first gap before the burst's; each phase starts
    when the one before sent its last request).  Times are the schedule's, without the machine."""
    rng = random.Random(seed + 1)

    def phase(rps: float, seconds: float, at: float) -> list[tuple[float, str, bool]]:
        names, weights = [n for n, _ in BASE_MIX], [w for _, w in BASE_MIX]
        out, t = [], 0.0
        while t < seconds:  # as ``Load.poisson``: the last gap may pass the end, and that request is sent
            t += rng.expovariate(rps)
            out.append((at + t, rng.choices(names, weights)[0], False))
        return out

    sent = phase(base_rps, base_s, 0.0)
    started = sent[-1][0]
    loops: list[Loop] = [(started + rng.expovariate(base_rps), base_rps, BASE_MIX, False),
                         (started + rng.expovariate(burst_rps), burst_rps, MIX, True)]
    while loops:
        i = min(range(len(loops)), key=lambda k: loops[k][0])
        at, rps, mix, bursting = loops[i]
        sent.append((at, rng.choices([n for n, _ in mix], [w for _, w in mix])[0], bursting))
        if at >= started + burst_s:
            del loops[i]
        else:
            loops[i] = (at + rng.expovariate(rps), rps, mix, bursting)
    ended = sent[-1][0]
    return sent + phase(base_rps, after_s, ended), started, ended


def replayed(seed: int, base_load: float, factor: float, base_s: float, burst_s: float,
             after_s: float) -> dict[str, Any]:
    """The real run's burst question for ``seed`` (``real_schedule``) on its fleet in virtual time,
    and the same schedule without the burst's requests for the steady share."""
    replicas, seqs = SIM_FLEETS["2xL4"]
    cap = capacity_rps(replicas, seqs)
    plan, started, ended = real_schedule(seed, base_load * cap, factor * cap, base_s, burst_s, after_s)
    warmup: Segments = [(0.0, 20.0, 2 * cap, MIX), (20.0, 70.0, base_load * cap, BASE_MIX)]
    first: Segments = [(0.0, base_s, base_load * cap, BASE_MIX)]
    sent = sim_sent(replicas, seqs, first, warmup, seed, schedule=[(t, tier) for t, tier, _ in plan])
    steady = sim_sent(replicas, seqs, first, warmup, seed, schedule=[(t, tier) for t, tier, b in plan if not b])
    return {"seed": seed, "fleet": "2xL4", "schedule": "real", "base_rps": round(base_load * cap, 2),
            "burst_rps": round(factor * cap, 2), "burst_s": burst_s,
            **burst_figures(sent, started, ended, ended + after_s, steady)}


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
                                                     args.max_open, args.seed))
                    out["pass"].update(out["burst"]["pass"])
        finally:
            for e in emus:
                e.stop()
    out["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
