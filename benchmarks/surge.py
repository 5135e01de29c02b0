"""Does Turbo hold from the first second of a surge, and do the lower tiers degrade gracefully?
(issue 38)

For each fleet of a set fixed here up front (GPU, sequence limit, time scale, request shape and
tier mix; 20–30 % Turbo, one fleet at 30 %), real emulators behind a real gateway (default tier
policy; each replica's ``max_num_seqs`` configured, as an operator knows it) are loaded by
``turbo-bench`` with one step: 0.2× the fleet's capacity from a cold gateway, then 2×.  The
capacity is computed, not assumed: the emulator's engine model run to saturation in virtual time.

Per fleet, the JSON reports:
- ``turbo_windows``: Turbo p50 / p95 TTFT per 5-s window after the step, as ratios to its
  TTFT at 0.2× (the unloaded reference); ``max_window_p95_ratio`` (target ≤ 1.5);
- ``turbo_shed_after_wait`` (target 0: a Turbo request refused after queueing) and
  ``turbo_refused_at_once`` / ``turbo_downgraded`` (Turbo beyond what the pool can give it:
  told at once), with ``turbo_longest_wait_before_refusal_s`` against Turbo's objective;
- ``cold_light``: every tier's p95 TTFT at 0.2× from the cold gateway and its ratio to Turbo's
  (target ≤ 1.5);
- ``goodput_at_2x``: per tier, answers within the tier's ``ttft_slo_s`` per second (answers
  ending in the last three quarters of the 2× half), and for Standard that goodput as a share of
  what it was given: of its answers (``share_of_served``, target ≥ 0.9), and, stricter, of the
  fleet's capacity less what Turbo and Relax were served (``share_of_capacity_left``); and the
  goodput of the requests that asked for Standard (``asked_goodput_rps``);
- ``restart``: the same step (a longer overload) with the gateway stopped 10 s into it and
  started again on the same port with the same store: the largest window p95 ratio from the
  third scrape interval after it answers again (target ≤ 1.5); requests sent while it was down
  fail (``turbo_errors_at_2x``);
- ``simulated_restart``: the restart in the simulator (``RESTART_DOWN_S`` down; the engines abort
  what the stopped gateway held, and the new core takes what the old one wrote to the store
  through ``sched/learned_share.py``, as the gateway's does), four seeds: the largest window p95 ratio from the third
  scrape interval after it is back, beside the same windows of the same run uninterrupted;
- the bench's dispatch lag (p99), so a run that measured the machine says so;
- ``engine_floor``: the same step in the simulator (virtual time: the emulator's engine model
  behind the gateway's own core, four seeds), once as measured here and once with Turbo *alone*
  at the rate it asks at 2× — no lower tier at all, so nothing for a gateway to reorder or hold
  back.  Its largest window p95 over the mixed 0.2× reference is what the engines give Turbo's own
  load: where it is above 1.5, no scheduling of the other tiers brings the real ratio under it
  (a 512-token prefill on the A100 fleet costs 4.4 decode steps: Turbo's prefills meet each other).

``--scheduling-policy priority`` runs every emulator with vLLM's ``--scheduling-policy priority``
and sets the pool's ``scheduling_policy: priority`` (the gateway passes each tier as the request's
``priority``), as a real fleet behind a tiered gateway should; the default, ``fcfs``, is what the
gateway must hold on by itself (docs/engines.md, "Priority inside the engine").

    python benchmarks/surge.py [--fleets l4,a100,h100] [--hold 25] [--no-restart] [--keep DIR]
                               [--scheduling-policy fcfs|priority] [--floor-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from turbogate.bench.options import build_load
from turbogate.bench.workload import TierMix
from turbogate.config import _default_tiers, hash_key, parse_config
from turbogate.engine import EngineConfig
from turbogate.engine.capacity import saturated_rate
from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results.io import read_jsonl
from turbogate.results.percentile import percentile
from turbogate.sched.learned_share import take, written
from turbogate.sim.build import SimConfig, build_simulation
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.restart import restart_gateway

KEY = "sk-surge"
MODEL = "llama-3.1-8b"
WINDOW_S = 5.0
SCRAPE_S = 1.0  # the gateway's default scrape interval
RESTART_AFTER_S = 10.0
#: The simulated restart's gateway answers again this long after it stopped (wall seconds).
RESTART_DOWN_S = 1.0


@dataclass(frozen=True)
class Fleet:
    name: str
    gpu: str
    seqs: int
    replicas: int
    scale: float  # emulator --time-scale: wall seconds per engine second
    prompt: int
    output: int
    mix: str

    @property
    def turbo_share(self) -> float:
        """Turbo's share of the requests (``mix``)."""
        return dict(TierMix.parse(self.mix).weights)["turbo"]

    def capacity_rps(self) -> float:
        """Requests/s (wall) the fleet completes at saturation, from the engine model."""
        dep = deployment(get_gpu(self.gpu), resolve_model(MODEL))
        return self.replicas * saturated_rate(dep, EngineConfig(max_num_seqs=self.seqs), self.prompt,
                                              self.output) / self.scale


#: Fixed before any tuning; nothing is tuned to one of them.
FLEETS: dict[str, Fleet] = {f.name: f for f in (
    Fleet("l4", "L4", 16, 2, 0.2, 256, 128, "turbo=0.2,standard=0.7,relax=0.1"),
    Fleet("a100", "A100-80G-SXM", 32, 2, 1.5, 512, 128, "turbo=0.25,standard=0.6,relax=0.15"),
    Fleet("h100", "H100-SXM", 8, 3, 1.0, 128, 256, "turbo=0.3,standard=0.6,relax=0.1"),
)}

SLO_S = {name: t.ttft_slo_s for name, t in _default_tiers().items()}


def pct(values: Sequence[float], q: float) -> float | None:
    """The project's percentile (``q`` a fraction)."""
    return percentile(values, 100.0 * q)


def ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else round(value / base, 3)


def bench(url: str, fleet: Fleet, hold_s: float, out: Path) -> subprocess.Popen[bytes]:
    cap = fleet.capacity_rps()
    cmd = [sys.executable, "-m", "turbogate", "bench", "--host", url, "--api-key", KEY, "--model", MODEL,
           "--shape", "steps", "--qps-start", f"{0.2 * cap:.3f}", "--qps-end", f"{2.0 * cap:.3f}", "--steps", "2",
           "--duration", str(2 * hold_s), "--tiers", fleet.mix,
           "--prompt-tokens", f"{fleet.prompt}:0:{fleet.prompt}:{fleet.prompt}",
           "--output-tokens", f"{fleet.output}:0:{fleet.output}:{fleet.output}",
           "--out", str(out), "--no-live", "--no-report", "--drain", "30"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def gateway_config(fleet: Fleet, emulators: list[Service], folder: Path, policy: str) -> Path:
    config = {
        "tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "p", "models": [MODEL], "scheduling_policy": policy,
                   "replicas": [{"url": e.url, "engine": "emulator", "max_num_seqs": fleet.seqs} for e in emulators]}],
        "store": {"kind": "sqlite", "path": str(folder / "state.sqlite3")},
    }
    path = folder / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def analyse(records: list[dict[str, Any]], fleet: Fleet, hold_s: float, from_s: float | None = None) -> dict[str, Any]:
    """The figures of one stepped run (``from_s``: count Turbo windows only from there on)."""
    def ok_ttft(rs: list[dict[str, Any]], tier: str, served: str | None = None) -> list[float]:
        return [float(r["ttft_s"]) for r in rs if r.get("tier_asked") == tier and r.get("ok")
                and r.get("ttft_s") is not None and (served is None or r.get("tier_served") == served)]

    light = [r for r in records if float(r["scheduled_s"]) < hold_s]
    heavy = [r for r in records if float(r["scheduled_s"]) >= hold_s]
    turbo_light = ok_ttft(light, "turbo")
    base50, base95 = pct(turbo_light, 0.5), pct(turbo_light, 0.95)
    windows = []
    start = hold_s if from_s is None else from_s
    t = start
    while t + WINDOW_S <= 2 * hold_s + 1e-9:
        w = [r for r in heavy if t <= float(r["scheduled_s"]) < t + WINDOW_S]
        tt = ok_ttft(w, "turbo", "turbo")
        windows.append({"from_s": round(t - hold_s, 1), "n": len(tt), "p50_ratio": ratio(pct(tt, 0.5), base50),
                        "p95_ratio": ratio(pct(tt, 0.95), base95)})
        t += WINDOW_S
    asked = [r for r in heavy if r.get("tier_asked") == "turbo"]
    refused = [r for r in asked if r.get("status") in (429, 503)]
    turbo_slo = SLO_S["turbo"] or 0.0
    waited = [float(r["e2e_s"]) for r in refused if r.get("e2e_s") is not None]
    out: dict[str, Any] = {
        "turbo_unloaded_ttft_s": {"p50": base50, "p95": base95, "n": len(turbo_light)},
        "turbo_windows": windows,
        "max_window_p95_ratio": max((w["p95_ratio"] for w in windows if w["p95_ratio"] is not None), default=None),
        "turbo_asked_at_2x": len(asked),
        "turbo_downgraded": sum(1 for r in asked if r.get("ok") and r.get("tier_served") != "turbo"),
        "turbo_refused_at_once": sum(1 for r in refused if float(r.get("e2e_s") or 0.0) <= turbo_slo),
        "turbo_shed_after_wait": sum(1 for r in refused if float(r.get("e2e_s") or 0.0) > turbo_slo),
        "turbo_longest_wait_before_refusal_s": max(waited, default=None),
        "turbo_errors_at_2x": sum(1 for r in asked if not r.get("ok") and r.get("status") not in (429, 503)),
    }
    # Every tier at 0.2× from the cold gateway, against Turbo's p95.
    cold = {}
    for tier in ("turbo", "standard", "relax"):
        p95 = pct(ok_ttft(light, tier), 0.95)
        cold[tier] = {"p95_s": p95, "ratio_to_turbo": ratio(p95, base95)}
    out["cold_light"] = cold
    # Goodput within each tier's objective at 2×: answers that ended in the heavy half's last
    # three quarters (past the step's first seconds, before the drain), per second of it.
    lo, hi = 1.25 * hold_s, 2.0 * hold_s
    span = hi - lo
    ended = [r for r in records if r.get("ok") and r.get("end_s") is not None and lo <= float(r["end_s"]) < hi]
    served = {tier: [r for r in ended if r.get("tier_served") == tier] for tier in ("turbo", "standard", "relax")}

    def within(r: dict[str, Any], tier: str) -> bool:
        return r.get("ttft_s") is not None and float(r["ttft_s"]) <= (SLO_S[tier] or 1e9)

    good = {tier: [r for r in rs if within(r, tier)] for tier, rs in served.items()}
    cap = fleet.capacity_rps()
    given = cap - (len(served["turbo"]) + len(served["relax"])) / span
    out["goodput_at_2x"] = {
        tier: {"slo_s": SLO_S[tier], "served_rps": round(len(served[tier]) / span, 3),
               "goodput_rps": round(len(good[tier]) / span, 3)} for tier in served}
    std = out["goodput_at_2x"]["standard"]
    # What Standard was given: the slots' throughput it was served (its answers per second); and,
    # stricter, the fleet's capacity less what Turbo and Relax were served (so the holdback's idle
    # headroom counts against it too).
    std["share_of_served"] = round(len(good["standard"]) / len(served["standard"]), 3) if served["standard"] else None
    # Those that asked for Standard: unlike the goodput by the tier served, it does not move when
    # Turbo's excess is served Standard instead of Turbo.
    asked = sum(1 for r in ended if r.get("tier_asked") == "standard" and within(r, "standard"))
    std["asked_goodput_rps"] = round(asked / span, 3)
    std["capacity_left_rps"] = round(given, 3)
    std["share_of_capacity_left"] = round(len(good["standard"]) / span / given, 3) if given > 0 else None
    lags = [float(r.get("dispatch_lag_s") or 0.0) for r in records]
    out["bench_dispatch_lag_p99_ms"] = round(1000 * (pct(lags, 0.99) or 0.0), 2)
    out["requests"] = len(records)
    return out


def simulated(fleet: Fleet, hold_s: float, seed: int, turbo_alone: bool,
              restart_at_s: float | None = None) -> list[dict[str, Any]]:
    """The stepped run in the simulator, its records as the bench writes them in wall seconds:
    the mixed load, or Turbo alone at its share of it; ``restart_at_s`` (wall): the gateway's core
    stopped then and a new one started ``RESTART_DOWN_S`` later with what the old one left in the
    store (``sim/restart.py``)."""
    scale = fleet.scale
    share = fleet.turbo_share
    cap = fleet.capacity_rps() * scale  # engine seconds
    lo, hi = (0.2 * share, 2.0 * share) if turbo_alone else (0.2, 2.0)
    gateway = parse_config({
        "tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "scrape": {"interval_s": SCRAPE_S / scale},
        "pools": [{"name": "p", "models": [MODEL],
                   "replicas": [{"url": f"http://r{i}", "max_num_seqs": fleet.seqs} for i in range(fleet.replicas)]}],
    })
    sim_fleet = parse_fleet({"pools": [{"name": "p", "replicas": [
        {"count": fleet.replicas, "gpu": fleet.gpu, "model": MODEL, "max_num_seqs": fleet.seqs}]}]})
    load = build_load(shape="steps", qps=None, qps_start=lo * cap, qps_end=hi * cap, steps=2,
                      duration=2 * hold_s / scale, arrivals="poisson", burstiness=1.0,
                      prompt_tokens=str(fleet.prompt), output_tokens=str(fleet.output), dataset=None, no_seed=False,
                      tiers="turbo=1" if turbo_alone else fleet.mix, n_api_keys=1, random_seed=seed, slo=None,
                      knee_method="throughput", knee_k=2.0, knee_metric="e2e", fleet_cost=1.0, tier_cost=None)
    sim, _ = build_simulation(SimConfig(gateway=gateway, fleet=sim_fleet, load=load, api_keys=(KEY,)))
    if restart_at_s is not None:
        store: dict[str, str] = {}  # the shared store, in memory; one wall clock for both processes
        restart_gateway(sim, restart_at_s / scale, RESTART_DOWN_S / scale,
                        hand_over=lambda flow: store.update(written(flow, 0.0)),
                        take_over=lambda flow: take(flow, store, 0.0))
    out = []
    for r in sorted(sim.run(), key=lambda r: r.id):
        d = r.to_dict()
        for key in ("scheduled_s", "ttft_s", "e2e_s", "end_s"):
            if d.get(key) is not None:
                d[key] = float(d[key]) * scale
        out.append(d)
    return out


def engine_floor(fleet: Fleet, hold_s: float, seeds: Sequence[int] = (1, 2, 3, 4)) -> dict[str, Any]:
    """Per seed, the simulated run's largest window p95 ratio, and Turbo alone's (see the module
    docstring), both over the simulated mixed run's Turbo p95 at 0.2×."""
    mixed, alone = [], []
    for seed in seeds:
        m = analyse(simulated(fleet, hold_s, seed, turbo_alone=False), fleet, hold_s)
        base = m["turbo_unloaded_ttft_s"]["p95"]
        a = analyse(simulated(fleet, hold_s, seed, turbo_alone=True), fleet, hold_s)
        worst = max((w["p95_ratio"] * a["turbo_unloaded_ttft_s"]["p95"] for w in a["turbo_windows"]
                     if w["p95_ratio"] is not None), default=None)
        mixed.append(m["max_window_p95_ratio"])
        alone.append(ratio(worst, base))
    return {"seeds": list(seeds), "simulated_max_window_p95_ratio": mixed, "turbo_alone_max_window_p95_ratio": alone,
            "turbo_alone_median": _median(alone), "simulated_median": _median(mixed)}


def simulated_restart(fleet: Fleet, hold_s: float, seeds: Sequence[int] = (1, 2, 3, 4)) -> dict[str, Any]:
    """Per seed, the restart run in the simulator (``run_fleet``'s: a longer overload, the gateway's
    core stopped ``RESTART_AFTER_S`` into it and back ``RESTART_DOWN_S`` later with what the old one
    wrote to the store): the largest window p95 ratio from the third scrape interval after it is
    back, and the same windows' of the same run uninterrupted (what a restart should cost: nothing)."""
    long_hold = hold_s + RESTART_AFTER_S + 3 * SCRAPE_S
    stop = long_hold + RESTART_AFTER_S
    counted_from = stop + RESTART_DOWN_S + 3 * SCRAPE_S
    restarted: list[float | None] = []
    uninterrupted: list[float | None] = []
    for seed in seeds:
        for runs, at in ((restarted, stop), (uninterrupted, None)):
            records = simulated(fleet, long_hold, seed, turbo_alone=False, restart_at_s=at)
            runs.append(analyse(records, fleet, long_hold, from_s=counted_from)["max_window_p95_ratio"])
    return {"seeds": list(seeds), "counted_from_s": round(counted_from - long_hold, 2),
            "restarted_max_window_p95_ratio": restarted, "uninterrupted_max_window_p95_ratio": uninterrupted,
            "restarted_median": _median(restarted), "uninterrupted_median": _median(uninterrupted)}


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return None if not known else round(statistics.median(known), 3)


def run_fleet(fleet: Fleet, hold_s: float, folder: Path, restart: bool, policy: str) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    emulators = [start_emulator("--gpu", fleet.gpu, "--model", MODEL, "--max-num-seqs", str(fleet.seqs),
                                "--time-scale", str(fleet.scale), "--scheduling-policy", policy, log_dir=folder)
                 for _ in range(fleet.replicas)]
    try:
        config = gateway_config(fleet, emulators, folder, policy)
        result: dict[str, Any] = {"gpu": fleet.gpu, "max_num_seqs": fleet.seqs, "replicas": fleet.replicas,
                                  "time_scale": fleet.scale, "prompt_tokens": fleet.prompt,
                                  "output_tokens": fleet.output, "mix": fleet.mix,
                                  "capacity_rps": round(fleet.capacity_rps(), 2)}
        load0 = os.getloadavg()[0]
        gateway = start_gateway(config, log_dir=folder)  # cold: a new gateway and a new store
        try:
            proc = bench(gateway.url, fleet, hold_s, folder / "step")
            proc.wait()
        finally:
            gateway.stop()
        result["step"] = analyse(list(read_jsonl(folder / "step" / "requests.jsonl")), fleet, hold_s)
        if restart:
            # Long enough at 2× to count several windows after the restart and its scrapes.
            long_hold = hold_s + RESTART_AFTER_S + 3 * SCRAPE_S
            gateway = start_gateway(config, log_dir=folder)  # the same store: what the last one learnt
            port = gateway.port
            restarted_at: list[float] = []
            t0 = time.monotonic()
            proc = bench(gateway.url, fleet, long_hold, folder / "restart")

            def restart_gateway() -> None:
                nonlocal gateway
                time.sleep(max(0.0, long_hold + RESTART_AFTER_S - (time.monotonic() - t0)))
                stopped_at = time.monotonic() - t0
                gateway.stop()
                gateway = start_gateway(config, log_dir=folder, port=port)
                restarted_at.extend((stopped_at, time.monotonic() - t0))

            thread = threading.Thread(target=restart_gateway, daemon=True)
            thread.start()
            proc.wait()
            thread.join()
            gateway.stop()
            stopped, back = restarted_at if restarted_at else (long_hold + RESTART_AFTER_S,) * 2
            records = list(read_jsonl(folder / "restart" / "requests.jsonl"))
            counted_from = back + 3 * SCRAPE_S
            r = analyse(records, fleet, long_hold, from_s=counted_from)
            result["restart"] = {"stopped_at_s": round(stopped - long_hold, 2),
                                 "back_at_s": round(back - long_hold, 2),
                                 "counted_from_s": round(counted_from - long_hold, 2),
                                 "turbo_windows": r["turbo_windows"], "max_window_p95_ratio": r["max_window_p95_ratio"],
                                 "turbo_shed_after_wait": r["turbo_shed_after_wait"],
                                 "turbo_errors_at_2x": r["turbo_errors_at_2x"]}
        result["loadavg"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        result["engine_floor"] = engine_floor(fleet, hold_s)
        if restart:
            result["simulated_restart"] = simulated_restart(fleet, hold_s)
        return result
    finally:
        for e in emulators:
            e.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fleets", default=",".join(FLEETS), help="comma-separated: " + ", ".join(FLEETS))
    ap.add_argument("--hold", type=float, default=25.0, help="seconds at 0.2× and then at 2× (each)")
    ap.add_argument("--no-restart", action="store_true", help="skip the restarted-gateway run")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders and logs here")
    ap.add_argument("--floor-only", action="store_true",
                    help="only the simulated engine_floor and simulated_restart per fleet (seconds, no real "
                         "processes)")
    ap.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs",
                    help="the engines' scheduling policy (and the pool's): priority as vLLM's")
    args = ap.parse_args()
    names = [n for n in args.fleets.split(",") if n]
    unknown = [n for n in names if n not in FLEETS]
    if unknown:
        ap.error(f"--fleets: unknown {', '.join(unknown)} (known: {', '.join(FLEETS)})")
    out: dict[str, Any] = {"hold_s": args.hold, "window_s": WINDOW_S, "ttft_slo_s": SLO_S,
                           "scheduling_policy": args.scheduling_policy, "fleets": {}}
    if args.floor_only:
        print(json.dumps({"hold_s": args.hold, "window_s": WINDOW_S,
                          "fleets": {n: {"engine_floor": engine_floor(FLEETS[n], args.hold),
                                         "simulated_restart": simulated_restart(FLEETS[n], args.hold)}
                                     for n in names}}))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for name in names:
            print(f"surge: fleet {name} …", file=sys.stderr, flush=True)
            out["fleets"][name] = run_fleet(FLEETS[name], args.hold, root / name, not args.no_restart,
                                           args.scheduling_policy)
    fleets = out["fleets"].values()
    cold = [t["ratio_to_turbo"] for f in fleets for t in f["step"]["cold_light"].values()]
    given = [f["step"]["goodput_at_2x"]["standard"]["share_of_served"] for f in fleets]
    left = [f["step"]["goodput_at_2x"]["standard"]["share_of_capacity_left"] for f in fleets]
    ratios = [f["step"]["max_window_p95_ratio"] for f in fleets]
    out["verdict"] = {
        "max_window_p95_ratio": max((r for r in ratios if r is not None), default=None),
        "turbo_shed_after_wait": sum(f["step"]["turbo_shed_after_wait"] for f in fleets),
        "restart_max_window_p95_ratio": max((f["restart"]["max_window_p95_ratio"] for f in fleets
                                             if "restart" in f and f["restart"]["max_window_p95_ratio"] is not None),
                                            default=None),
        "cold_light_max_ratio_to_turbo": max((r for r in cold if r is not None), default=None),
        "standard_goodput_share_of_served_min": min((g for g in given if g is not None), default=None),
        "standard_goodput_share_of_capacity_left_min": min((g for g in left if g is not None), default=None),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
