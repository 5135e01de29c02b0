"""``turbogate demo``: two emulated replicas + the gateway + a Turbo-vs-Standard ramp past the knee.

Everything runs on 127.0.0.1 free ports with embedded defaults: the perf model gives the fleet's
capacity for the chosen GPU/model/batch, the ramp goes from well below to well above it, and the
bench writes the usual run folder (report included).  All child processes stop at the end, also
on Ctrl-C (the bench then stops sending, lets in-flight requests finish and still writes).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from pathlib import Path

import typer
import yaml
from rich.console import Console

from turbogate.bench.arrivals import Arrivals
from turbogate.bench.run import BenchConfig, BenchResult, knee_line, run_bench
from turbogate.bench.runner import Target
from turbogate.bench.workload import TierMix, TruncNormal, Workload
from turbogate.config import hash_key
from turbogate.perf import deployment, get_gpu, get_model, saturation
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results import KneeSettings
from turbogate.results.fmt import fmt_num, fmt_signed_pct

DEMO_KEY = "sk-turbogate-demo"
GPU, MODEL, MAX_SEQS = "L4", "llama-3.1-8b", 8
PROMPT, OUTPUT = 128, 48
CHAT_PROMPT_TOKENS = PROMPT + 10  # the emulator's chat framing: BOS + 5 per message + 4


def fleet_capacity(replicas: int, time_scale: float) -> float:
    """Requests/s (wall clock) the emulated fleet sustains, from the perf model."""
    dep = deployment(get_gpu(GPU), get_model(MODEL))
    per_replica = saturation(dep, CHAT_PROMPT_TOKENS, OUTPUT, max_num_seqs=MAX_SEQS).request_rate
    return replicas * per_replica / time_scale


def gateway_yaml(urls: list[str]) -> str:
    cfg = {
        "tenants": [{"name": "demo", "key_sha256": hash_key(DEMO_KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "demo", "models": [MODEL],
                   "replicas": [{"url": u, "engine": "emulator", "max_concurrency": MAX_SEQS} for u in urls]}],
        "scrape": {"interval_s": 0.5, "stale_after_s": 3.0, "timeout_s": 1.0},
        "health": {"interval_s": 0.5, "eject_after_failures": 3},
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def demo(
    duration: float = typer.Option(60.0, "--duration", min=10.0, max=600.0,
                                   help="Seconds of ramp (the default keeps the demo under 90 s)."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/demo-<timestamp>)."),
    time_scale: float = typer.Option(0.5, "--time-scale", min=0.01, max=1.0,
                                     help="Emulator time scale (0.5 = twice real speed)."),
    turbo_share: float = typer.Option(0.2, "--turbo-share", min=0.01, max=0.99, help="Share of Turbo requests."),
    live: bool = typer.Option(True, "--live/--no-live", help="Live progress display."),
) -> None:
    """Emulated fleet + gateway + a short Turbo-vs-Standard ramp + report."""
    console = Console(width=None if Console().is_terminal else 150)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = out or Path("runs") / f"demo-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    logs = run_dir / "logs"
    cap = fleet_capacity(2, time_scale)
    start, end = 0.3 * cap, 1.8 * cap
    console.print(f"[bold]turbogate demo[/bold]: 2 × emulated {MODEL} on {GPU} (max {MAX_SEQS} seqs, time scale "
                  f"{fmt_num(time_scale)}) behind the gateway; perf model capacity ≈ {fmt_num(cap)} req/s; ramp "
                  f"{fmt_num(start)} → {fmt_num(end)} req/s over {fmt_num(duration)} s, Turbo {turbo_share:.0%} / "
                  f"Standard {1 - turbo_share:.0%}")
    services: list[Service] = []
    result: BenchResult | None = None
    try:
        for _ in range(2):
            services.append(start_emulator("--gpu", GPU, "--model", MODEL, "--max-num-seqs", str(MAX_SEQS),
                                           "--time-scale", str(time_scale), log_dir=logs))
        cfg_path = run_dir / "gateway.yaml"
        cfg_path.write_text(gateway_yaml([s.url for s in services]))
        gw = start_gateway(cfg_path, log_dir=logs)
        services.append(gw)
        console.print(f"replicas {services[0].url}, {services[1].url}; gateway {gw.url}")
        cfg = BenchConfig(
            target=Target(base_url=gw.url, route="/v1/chat/completions", model=MODEL, api_keys=(DEMO_KEY,),
                          timeout_s=120.0),
            shape="linear",
            # Steps of at least ~5 s, so each holds enough requests for the knee's evidence rules.
            qps_start=start, qps_end=end, steps=max(4, min(8, round(duration / 5))), duration_s=duration,
            arrivals=Arrivals("poisson"),
            workload=Workload(prompt_tokens=TruncNormal(PROMPT, 0, PROMPT, PROMPT),
                              output_tokens=TruncNormal(OUTPUT, 0, OUTPUT, OUTPUT),
                              tiers=TierMix.parse(f"turbo={turbo_share},standard={1 - turbo_share}"), n_api_keys=1),
            random_seed=1, scrape=(gw.url + "/metrics", *(s.url + "/metrics" for s in services[:2])),
            metrics=("p95-latency",), knee=KneeSettings(method="throughput"), out=run_dir, grace_s=10.0, drain_s=10.0,
            live=live,
            label=f"turbogate demo: 2 replicas, capacity {fmt_num(cap)} req/s (perf model)")
        result = _run(cfg)
    except KeyboardInterrupt:
        console.print("interrupted before the ramp started; shutting down")
    finally:
        for svc in reversed(services):
            with contextlib.suppress(Exception):
                svc.stop()
    if result is None:
        raise typer.Exit(code=130)
    from turbogate.bench.cli import print_roi

    s = result.summary
    console.print(knee_line(s))
    knee = s.knee()
    if knee is not None:
        console.print(f"(measured fleet knee {fmt_num(knee)} req/s against the perf model's capacity of the engines, "
                      f"{fmt_num(cap)} req/s: {fmt_signed_pct(knee / cap - 1)}; the gateway dispatches Standard only "
                      "while the pool is under 85 % use, holding headroom for Turbo, so the fleet's knee sits below)")
    print_roi(s, console)
    for w in s.warnings:
        console.print(f"[bold yellow]warning:[/bold yellow] {w}")
    console.print(f"[bold]Recommendation:[/bold] {s.recommendation}")
    console.print(f"report: {result.run_dir / 'report.html'}" + ("  (interrupted)" if s.interrupted else ""))
    if result.failure:
        console.print(f"turbogate demo: stopped: {result.failure}")
        raise typer.Exit(code=1)


def _run(cfg: BenchConfig) -> BenchResult:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.run(run_bench(cfg))
    return uvloop.run(run_bench(cfg))
