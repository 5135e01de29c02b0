"""``turbogate demo``: where does Turbo pay?  sim places the steps, two emulated replicas behind the gateway
measure them, and the answer is a band of load with evidence at both ends.

1. ``sim`` (the gateway's own core in virtual time, about a second) runs the demo's fleet over a ramp
   and predicts its knee.
2. The real processes (two emulators and the gateway on 127.0.0.1 free ports) are benched at held
   steps placed around that knee: two below it (where Standard is as good as it gets), three above it,
   the highest ones holding enough Turbo requests to say whether Turbo itself still keeps up.
3. The band: from the measured fleet knee to where Turbo degrades, or "Turbo holds through X req/s"
   when the highest steps measured it keeping up.

The fleet (2 × A100 with Llama-3.1-8B, 8 sequences each, at real speed) keeps this machine's work
small: its knee is about 8 req/s, so the bench, the gateway and the emulators stay far from a 2-core
machine's limits (the bench's machine verdict checks it at every step).  All child processes stop at
the end, also on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console

from turbogate.bench.arrivals import Arrivals
from turbogate.bench.machine import LAG_SHARE
from turbogate.bench.options import LoadOptions
from turbogate.bench.run import BenchConfig, BenchResult, run_bench
from turbogate.bench.runner import Target
from turbogate.bench.workload import TierMix, TruncNormal, Workload
from turbogate.config import hash_key, parse_config
from turbogate.perf import deployment, get_gpu, get_model, saturation
from turbogate.perf.default_workload import OUTPUT_TOKENS, PROMPT_TOKENS
from turbogate.procs import Service, start_emulator, start_service, wait_healthy
from turbogate.results import ALL, SLO, CostConfig, KneeSettings, Summary
from turbogate.results.fmt import fmt_ms, fmt_num

DEMO_KEY = "sk-turbogate-demo"
GPU, MODEL, MAX_SEQS, REPLICAS = "A100-80G-SXM", "llama-3.1-8b", 8, 2
CHAT_PROMPT_TOKENS = PROMPT_TOKENS + 10  # the emulator's chat framing: BOS + 5 per message + 4
# The bench's steps as multiples of sim's knee: two below it, three above; the top two hold enough Turbo.
STEP_MULTIPLES = (0.5, 0.8, 1.4, 2.0, 2.6)
SIM_MULTIPLES = (0.3, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.8, 2.2)  # of the perf model's capacity
SIM_HOLD_S = 30.0  # virtual seconds per sim step
CONFIDENT = ("medium", "high")
DEMO_FLAGS = ("--duration", "--time-scale", "--turbo-share", "--out", "--live", "--no-live")


def fleet_capacity(replicas: int, time_scale: float) -> float:
    """Requests/s (wall clock) the engines sustain, from the perf model (an upper bound on the fleet's knee)."""
    dep = deployment(get_gpu(GPU), get_model(MODEL))
    per_replica = saturation(dep, CHAT_PROMPT_TOKENS, OUTPUT_TOKENS, max_num_seqs=MAX_SEQS).request_rate
    return replicas * per_replica / time_scale


def gateway_config(urls: list[str], model: str = MODEL, max_seqs: int = MAX_SEQS) -> dict[str, Any]:
    """One pool of emulators, the demo key allowed every tier (also benchmarks/three_way.py's gateway)."""
    return {
        "tenants": [{"name": "demo", "key_sha256": hash_key(DEMO_KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "demo", "models": [model],
                   "replicas": [{"url": u, "engine": "emulator", "max_concurrency": max_seqs} for u in urls]}],
        "scrape": {"interval_s": 0.5, "stale_after_s": 3.0, "timeout_s": 1.0},
        "health": {"interval_s": 0.5, "eject_after_failures": 3},
    }


def demo_workload(turbo_share: float) -> Workload:
    return Workload(prompt_tokens=TruncNormal.fixed(PROMPT_TOKENS), output_tokens=TruncNormal.fixed(OUTPUT_TOKENS),
                    tiers=TierMix.parse(f"turbo={turbo_share},standard={1 - turbo_share}"), n_api_keys=1)


def predict(turbo_share: float, seed: int = 1) -> Summary:
    """The demo's fleet in ``sim`` (virtual time = model time): a stepped ramp over the perf model's capacity."""
    from turbogate.sim.build import SimConfig
    from turbogate.sim.fleet import parse_fleet
    from turbogate.sim.run import simulate, summarize_sim

    cap = fleet_capacity(REPLICAS, 1.0)
    rates = tuple(cap * m for m in SIM_MULTIPLES)
    load = LoadOptions(shape="steps", qps=rates[0], qps_start=rates[0], qps_end=rates[-1], steps=len(rates),
                       duration_s=SIM_HOLD_S * len(rates), arrivals=Arrivals("poisson"),
                       workload=demo_workload(turbo_share), random_seed=seed, slo=SLO(),
                       knee=KneeSettings(method="throughput"), cost=CostConfig(), rates=rates)
    fleet = {"pools": [{"name": "demo", "replicas": [{"count": REPLICAS, "gpu": GPU, "model": MODEL,
                                                      "max_num_seqs": MAX_SEQS}]}]}
    urls = [f"http://127.0.0.1:{9 + i}" for i in range(REPLICAS)]  # never called: the sim's replicas are models
    sc = SimConfig(gateway=parse_config(gateway_config(urls), "demo gateway"), fleet=parse_fleet(fleet, "demo fleet"),
                   load=load, api_keys=(DEMO_KEY,), label="turbogate demo: sim's prediction")
    return summarize_sim(sc, simulate(sc))


@dataclass(frozen=True, slots=True)
class Band:
    """Where Turbo pays, with the evidence at each end."""

    low: float | None  # the fleet's knee: below it Standard is as good
    low_confidence: str | None
    high: float | None  # where Turbo itself degrades, or the highest load it was measured holding
    high_kind: str  # "degrades" | "holds" | "unknown"
    high_confidence: str | None
    why_not: str = ""  # what is missing when an end is not confident

    @property
    def concluded(self) -> bool:
        return self.low_confidence in CONFIDENT and self.high_confidence in CONFIDENT


def turbo_band(s: Summary, tier: str = "turbo") -> Band:
    """The band from a run's knees: the fleet's (throughput) at the low end; at the high end Turbo's own knee
    (by throughput or by its p95 latency, the lower), else its "none" verdict over the steps it voted in."""
    fleet, turbo = s.knees.get(ALL), s.knees.get(tier)
    low = fleet.value if fleet is not None and fleet.verdict == "knee" else None
    low_conf = fleet.confidence if low is not None and fleet is not None else None
    missing = [] if low_conf in CONFIDENT else [f"fleet knee: {fleet.note if fleet else 'no steps'}"]
    if turbo is None:
        return Band(low, low_conf, None, "unknown", None, "; ".join([*missing, "no Turbo requests"]))
    degraded = [(e.value, e.confidence) for e in (turbo.evidence.get(m) for m in ("throughput", "latency"))
                if e is not None and e.verdict == "knee" and e.value is not None]
    if degraded:
        value, conf = min(degraded)
        return Band(low, low_conf, value, "degrades", conf, "; ".join(missing))
    voted = [v for v in turbo.evidence["throughput"].steps if v.state in ("ok", "fail")] \
        if "throughput" in turbo.evidence else []
    if turbo.verdict == "none" and voted:
        return Band(low, low_conf, max(v.offered_rps for v in voted), "holds", turbo.confidence, "; ".join(missing))
    return Band(low, low_conf, None, "unknown", None, "; ".join([*missing, f"Turbo: {turbo.note}"]))


def band_line(b: Band, top_turbo: int, below: str = "") -> str:
    low = (f"from the fleet knee ≈ {fmt_num(b.low)} req/s ({b.low_confidence} confidence; below it Standard "
           f"keeps up too{below})") if b.low is not None else "from an unmeasured fleet knee"
    if b.high_kind == "degrades":
        high = f"to ≈ {fmt_num(b.high)} req/s, where Turbo itself degrades ({b.high_confidence} confidence)"
    elif b.high_kind == "holds":
        high = (f"through at least {fmt_num(b.high)} req/s: Turbo holds through {fmt_num(b.high)} req/s "
                f"({b.high_confidence} confidence, ≥ {top_turbo} Turbo requests in the highest step)")
    else:
        high = "to an unmeasured upper end"
    verdict = "Turbo pays " + low + " " + high + "."
    return verdict if b.concluded else verdict + f" Inconclusive: {demo_words(b.why_not)}"


def demo_words(text: str) -> str:
    """A bench/knee message with only the demo's own flags: a sentence naming another command's flag is
    replaced by the demo's own remedy."""
    parts = re.split(r"(?<=[.;])\s+", text)
    kept = [p for p in parts if all(f in DEMO_FLAGS for f in re.findall(r"(?<![\w-])--[a-z][a-z-]*", p))]
    out = " ".join(kept).strip().rstrip(";")
    if len(kept) < len(parts):
        out += " — rerun with a longer --duration for more requests per step"
    return out


def demo(
    duration: float = typer.Option(45.0, "--duration", min=20.0, max=600.0,
                                   help="Seconds of load on the real processes, in five held steps (the default "
                                        "keeps the whole demo under 90 s on two cores)."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/demo-<timestamp>)."),
    time_scale: float = typer.Option(1.0, "--time-scale", min=0.25, max=10.0,
                                     help="Emulator time scale: 1 = the modelled GPUs' real speed, 2 = half speed "
                                          "(half the req/s: lighter on a busy machine)."),
    turbo_share: float = typer.Option(0.2, "--turbo-share", min=0.01, max=0.99, help="Share of Turbo requests."),
    live: bool = typer.Option(True, "--live/--no-live", help="Live progress display."),
) -> None:
    """Where does Turbo pay? sim places the steps, the real gateway and emulators measure them."""
    console = Console(width=None if Console().is_terminal else 150)
    began = time.perf_counter()
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = out or Path("runs") / f"demo-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    logs = run_dir / "logs"
    cap = fleet_capacity(REPLICAS, time_scale)
    console.print(f"[bold]turbogate demo[/bold]: {REPLICAS} × emulated {MODEL} on {GPU} (max {MAX_SEQS} seqs, time "
                  f"scale {fmt_num(time_scale)}) behind the gateway; {PROMPT_TOKENS}/{OUTPUT_TOKENS} tokens, Turbo "
                  f"{turbo_share:.0%} / Standard {1 - turbo_share:.0%}; perf model capacity ≈ {fmt_num(cap)} req/s")
    services: list[Service] = []
    result: BenchResult | None = None
    try:
        # The children start while sim runs in this process: both take a few seconds of CPU.
        for _ in range(REPLICAS):
            services.append(start_emulator("--gpu", GPU, "--model", MODEL, "--max-num-seqs", str(MAX_SEQS),
                                           "--time-scale", str(time_scale), log_dir=logs, wait=False))
        cfg_path = run_dir / "gateway.yaml"
        cfg_path.write_text(yaml.safe_dump(gateway_config([s.url for s in services]), sort_keys=False))
        gw = start_service("gateway", ["serve", "--config", str(cfg_path)], log_dir=logs, wait=False)
        services.append(gw)
        t0 = time.perf_counter()
        predicted = predict(turbo_share)
        sim_knee = predicted.knee()
        if sim_knee is None:  # the perf model's capacity stands in (the sim ramp reaches 2.2× past it)
            sim_knee = fleet_capacity(REPLICAS, 1.0)
        knee_wall = sim_knee / time_scale
        rates = tuple(round(m * knee_wall, 3) for m in STEP_MULTIPLES)
        console.print(f"sim ({time.perf_counter() - t0:.1f} s, virtual time): fleet knee ≈ {fmt_num(knee_wall)} "
                      f"req/s ({predicted.knees[ALL].confidence or predicted.knees[ALL].verdict} confidence); "
                      f"benching {', '.join(fmt_num(r) for r in rates)} req/s, {fmt_num(duration / len(rates))} s each")
        for svc in services:
            wait_healthy(svc.url, svc.process, timeout=60.0)
        console.print("replicas " + ", ".join(s.url for s in services[:REPLICAS]) + f"; gateway {gw.url}")
        cfg = BenchConfig(
            target=Target(base_url=gw.url, route="/v1/chat/completions", model=MODEL, api_keys=(DEMO_KEY,),
                          timeout_s=60.0),
            shape="steps", rates=rates, qps_start=rates[0], qps_end=rates[-1], steps=len(rates), duration_s=duration,
            arrivals=Arrivals("poisson"), workload=demo_workload(turbo_share), random_seed=1,
            scrape=(gw.url + "/metrics", *(s.url + "/metrics" for s in services[:REPLICAS])),
            metrics=("p95-latency",), knee=KneeSettings(method="throughput"), out=run_dir, grace_s=5.0, drain_s=5.0,
            live=live, label=f"turbogate demo: steps around sim's knee {fmt_num(knee_wall)} req/s",
            # The lag that distorts the load is judged against the requests' own time (as the machine verdict
            # does): sim's median E2E, about 1.5 s here, so tens of milliseconds on a busy machine do not count.
            max_lag_s=max(0.05, LAG_SHARE * (predicted.overall[ALL].pct("e2e", "p50") or 0.0) * time_scale))
        result = _run(cfg)
    except KeyboardInterrupt:
        console.print("interrupted before the steps started; shutting down")
    finally:
        for svc in reversed(services):
            with contextlib.suppress(Exception):
                svc.stop()
    if result is None:
        raise typer.Exit(code=130)
    _conclude(console, result, predicted, time_scale, time.perf_counter() - began)
    if result.failure:
        console.print(f"turbogate demo: stopped: {demo_words(result.failure)}")
        raise typer.Exit(code=1)


def _conclude(console: Console, result: BenchResult, predicted: Summary, time_scale: float, wall_s: float) -> None:
    from turbogate.bench.cli import print_roi

    s = result.summary
    print_roi(s, console)
    for w in s.warnings:
        console.print(f"[bold yellow]warning:[/bold yellow] {demo_words(w)}")
    machine = s.config.get("machine", {})
    console.print(f"machine: {machine.get('line', 'not judged')}")
    top = max(s.steps, key=lambda st: st.offered_rps)
    top_turbo = top.tiers["turbo"].ok if "turbo" in top.tiers else 0
    band = turbo_band(s)
    sim_knee = predicted.knee()
    if band.low is not None and sim_knee is not None:
        sim_wall = sim_knee / time_scale
        console.print(f"fleet knee: measured {fmt_num(band.low)} req/s, sim predicted {fmt_num(sim_wall)} req/s "
                      f"({(band.low / sim_wall - 1) * 100:+.1f} %)")
    below_t = next((r for r in s.roi if r.band == "below" and r.tier == "turbo"), None)
    below_s = next((r for r in s.roi if r.band == "below" and r.tier == "standard"), None)
    below = "" if below_t is None or below_s is None else \
        f", p95 TTFT {fmt_ms(below_s.p95_ttft_s)} against Turbo's {fmt_ms(below_t.p95_ttft_s)}"
    console.print(f"[bold]Turbo band:[/bold] {band_line(band, top_turbo, below)}")
    console.print(f"[bold]Recommendation:[/bold] {demo_words(s.recommendation)}")
    console.print(f"report: {result.run_dir / 'report.html'}" + ("  (interrupted)" if s.interrupted else "")
                  + f"; demo took {wall_s:.0f} s")


def _run(cfg: BenchConfig) -> BenchResult:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.run(run_bench(cfg))
    return uvloop.run(run_bench(cfg))
