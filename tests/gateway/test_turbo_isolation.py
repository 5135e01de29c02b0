"""Turbo keeps its latency at 2× overload with the default config, end to end (issue 19).

Real emulators, the real gateway with a config that sets no ``max_concurrency`` and no tier
policy, and ``turbogate bench`` as the client.  Looser than ``benchmarks/turbo_isolation.py``
(shorter runs, the median rather than the p95, on a busy 2-core machine); the pure-core test
holds the tight bound.

A run that misses is measured once more from a fresh fleet (real time on a shared machine loses
the timing it measures now and then), and the gateway's own view of both runs is printed: the
limits it learned, how long replicas stayed in slow start, the engines' queues.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from tests.gateway.conftest import ADMIN, admin_state
from turbogate.config import _default_tiers, hash_key
from turbogate.engine import EngineConfig
from turbogate.engine.capacity import saturated_rate
from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.procs import start_emulator, start_gateway

GPU, MODEL, SEQS = "L4", "llama-3.1-8b", 8
# Real-time emulators (time scale 1): the fleet's capacity is small (about 7 req/s), so the
# streams at 2x cost the 2-core machine little CPU and the emulators keep their modelled speed;
# at faster scales the machine itself became the bottleneck inside the whole suite.
SCALE = 1.0
PROMPT, OUTPUT = 128, 32
KEY = "sk-isolation-test"
STANDARD_SLO_S = _default_tiers()["standard"].ttft_slo_s or 5.0


def fleet_capacity(replicas: int) -> float:
    """Completions/s at saturation, from the emulator's own engine in virtual time."""
    dep = deployment(get_gpu(GPU), resolve_model(MODEL))
    return replicas * saturated_rate(dep, EngineConfig(max_num_seqs=SEQS), PROMPT, OUTPUT) / SCALE


def bench(url: str, qps: float, seconds: float, tiers: str, out: Path) -> list[dict[str, object]]:
    cmd = [sys.executable, "-m", "turbogate", "bench", "--host", url, "--api-key", KEY, "--model", MODEL,
           "--qps", f"{qps:.3f}", "--duration", str(seconds), "--tiers", tiers, "--random-seed", "7",
           "--prompt-tokens", str(PROMPT - 10), "--output-tokens", str(OUTPUT), "--out", str(out),
           "--no-live", "--no-report", "--drain", "60"]
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line]


#: Fewer answers than this in a tier leaves its quantile unmeasured: the run is then one that lost
#: its timing (a starved machine answers little), and it counts as a miss to measure again.
MIN_ANSWERS = 20


def tier_ttft(records: list[dict[str, object]], tier: str, q: float) -> float | None:
    values = sorted(float(r["ttft_s"]) for r in records  # type: ignore[arg-type]
                    if r["tier_asked"] == tier and r["ok"] and r["ttft_s"] is not None)
    if len(values) < MIN_ANSWERS:
        return None
    return values[int(q * (len(values) - 1))]


def turbo_ttft(records: list[dict[str, object]], q: float) -> float | None:
    return tier_ttft(records, "turbo", q)


class Sampler:
    """The gateway's own view while the test runs (``/admin/state`` every half second): what a
    failure needs to say why, e.g. a learned limit above the engine's or replicas left in slow
    start, where Turbo waits in the engine's queue."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(0.5):
            try:
                state = admin_state(self.url)
            except OSError:
                continue  # a slow answer on a busy machine: the next sample will do
            pool = state["pools"]["p"]
            self.samples.append({"t": time.monotonic() - t0, "slots": pool["slots"], "turbo_queued":
                                 pool["queues"]["turbo"]["queued"], "replicas": state["replicas"]})

    def summary(self, start_s: float, end_s: float) -> dict[str, object]:
        rows = [s for s in self.samples if start_s <= s["t"] <= end_s]
        if not rows:
            return {}
        n = len(rows)
        reps = [r for s in rows for r in s["replicas"]]
        return {
            "samples": n,
            "mean_slots": round(sum(s["slots"] for s in rows) / n, 2),
            "max_limit": max(r["limit"] for r in reps),
            "slow_start_share": round(sum(bool(r["slow_start"]) for r in reps) / len(reps), 2),
            "mean_engine_waiting": round(sum(r["waiting"] or 0.0 for r in reps) / len(reps), 2),
            "turbo_queued_share": round(sum(s["turbo_queued"] > 0 for s in rows) / n, 2),
        }


def measure(tmp_path: Path) -> dict[str, object]:
    """One light run (Turbo alone at a fifth of capacity), then 2× with the tier mix."""
    cap = fleet_capacity(2)
    emulators = [start_emulator("--gpu", GPU, "--model", MODEL, "--max-num-seqs", str(SEQS), "--time-scale",
                                str(SCALE), log_dir=tmp_path / "logs") for _ in range(2)]
    cfg = {"tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
           "pools": [{"name": "p", "models": [MODEL],
                      "replicas": [{"url": e.url, "engine": "emulator"} for e in emulators]}],
           "scrape": {"interval_s": 0.5}, "admin": {"token_sha256": hash_key(ADMIN)}}
    (tmp_path / "gw.yaml").write_text(yaml.safe_dump(cfg))
    gateway = start_gateway(tmp_path / "gw.yaml", log_dir=tmp_path / "logs")
    mix = "turbo=0.2,standard=0.75,relax=0.05"
    try:
        light = bench(gateway.url, 0.2 * cap, 15, "turbo=1", tmp_path / "light")
        with Sampler(gateway.url) as sampler:
            run = bench(gateway.url, 2 * cap, 26, mix, tmp_path / "heavy")
        heavy = [r for r in run if float(r["scheduled_s"]) >= 6.0]  # after the gateway learned the limits
    finally:
        gateway.stop()
        for e in emulators:
            e.stop()
    done = [r for r in heavy if r["ok"]]
    return {
        "capacity_rps": cap,
        "turbo_p50_light_s": turbo_ttft(light, 0.5), "turbo_p50_heavy_s": turbo_ttft(heavy, 0.5),
        "turbo_p95_light_s": turbo_ttft(light, 0.95), "turbo_p95_heavy_s": turbo_ttft(heavy, 0.95),
        "standard_p50_heavy_s": tier_ttft(heavy, "standard", 0.5),
        "turbo_shed": sum(r["tier_asked"] == "turbo" and r["status"] in (429, 503) for r in heavy),
        "standard_shed": sum(r["tier_asked"] == "standard" and r["status"] in (429, 503) for r in heavy),
        "standard_share": sum(r["tier_served"] == "standard" for r in done) / max(1, len(done)),
        "relax_done": sum(r["tier_served"] == "relax" for r in done),
        # What the fleet delivered while saturated (all requests, whenever sent): far under its
        # computed capacity means the machine, not the gateway, was the bottleneck.
        "achieved_rps": sum(r["ok"] and 6.0 <= float(r["end_s"]) <= 26.0 for r in run) / 20.0,  # type: ignore[arg-type]
        "gateway": sampler.summary(6.0, 26.0),  # the same window
    }


def failures(f: dict[str, Any]) -> list[str]:
    """The acceptance points this run missed (empty: it holds)."""
    quantiles = ("turbo_p50_light_s", "turbo_p50_heavy_s", "turbo_p95_light_s", "turbo_p95_heavy_s",
                 "standard_p50_heavy_s")
    unmeasured = [name for name in quantiles if f[name] is None]
    if unmeasured:
        return [f"fewer than {MIN_ANSWERS} answers to measure {', '.join(unmeasured)}"]
    checks = {
        "Turbo's median at 2x within 2.5x its light-load median":
            f["turbo_p50_heavy_s"] <= 2.5 * f["turbo_p50_light_s"],
        # Standard's standing queue is served newest first (sched/codel.py): what it serves meets
        # its objective instead of waiting out a FIFO budget, so tiers show in who waits, not in
        # a tenfold gap between medians.
        "Turbo's median no more than Standard's (tiers, not FIFO)":
            f["turbo_p50_heavy_s"] <= f["standard_p50_heavy_s"],
        "Standard's median within its TTFT objective (controlled delay)":
            f["standard_p50_heavy_s"] <= STANDARD_SLO_S,
        "no Turbo request shed": f["turbo_shed"] == 0,
        "Standard keeps a fifth of what is served": f["standard_share"] >= 0.2,
        "Relax is served": f["relax_done"] > 0,
        "Standard's excess is what is shed": f["standard_shed"] > 0,
    }
    return [what for what, held in checks.items() if not held]


def test_turbo_holds_at_twice_capacity_with_the_default_config(tmp_path: Path) -> None:
    figures = measure(tmp_path / "run1")
    print(json.dumps(figures))  # shown by pytest when an assertion fails
    missed = failures(figures)
    if missed:
        # One more measurement, from a fresh fleet and gateway: a real-time run on a shared 2-core
        # machine now and then loses the timing it measures (CI, 2026-12-02: one run in many).
        # A broken isolation fails both; each run's figures and the gateway's own view are printed.
        again = measure(tmp_path / "run2")
        print(json.dumps(again))
        assert not failures(again), {"first": (missed, figures), "again": (failures(again), again)}
