"""``turbogate bench`` / ``turbo-bench``: open-loop load, the knee, and reports; ``bench compare A B``."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from turbogate.bench import option_groups as og
from turbogate.bench import options as opt
from turbogate.bench.collectors import parse_metrics_option
from turbogate.bench.failures import BenchFailed
from turbogate.bench.run import BenchConfig, BenchResult, knee_line, run_bench
from turbogate.bench.runner import TIER_VIA, Target
from turbogate.clierrors import OneLineErrors
from turbogate.config import Listen
from turbogate.errors import BadInput, TurbogateError
from turbogate.optgroup import expand
from turbogate.results import Summary, compare, load_run
from turbogate.results.fmt import fmt_cost, fmt_count, fmt_ms, fmt_num, fmt_pct, fmt_range, fmt_rate, fmt_signed_pct
from turbogate.results.knee import method_cell

app = typer.Typer(
    help="Drive open-loop load (constant, ramps, sweeps, --find-knee), find the knee, write a run folder + report.",
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
    subcommand_metavar="[compare RUN_A RUN_B]",  # the bench itself runs without a subcommand
)


_LISTEN = Listen.model_validate({})
DEFAULT_HOST = f"http://{_LISTEN.host}:{_LISTEN.port}"


def _bad(message: str) -> BadInput:
    return BadInput(message)


def print_summary(summary: Summary, console: Console) -> None:
    # Goodput per tier: each tier's answers per second that met the run's --slo (a column only with one).
    slo = summary.slo.is_set()
    t = Table(title="Overall per tier")
    for col in ("tier", "requests", "ok", "errors", "unfinished", "req/s", *(("goodput/s",) if slo else ()),
                "out tok/s", "TTFT p50", "TTFT p95", "TPOT p50", "E2E p95", "lag p99"):
        t.add_column(col)
    for tier, g in summary.overall.items():
        t.add_row(tier, fmt_count(g.requests), fmt_count(g.ok), f"{fmt_count(g.errors)} ({fmt_pct(g.error_rate)})",
                  fmt_count(g.unfinished), fmt_num(g.achieved_rps), *((fmt_num(g.goodput_rps),) if slo else ()),
                  fmt_num(g.output_tokens_per_s), fmt_ms(g.pct("ttft", "p50")),
                  fmt_ms(g.pct("ttft", "p95")), fmt_ms(g.pct("tpot", "p50")), fmt_ms(g.pct("e2e", "p95")),
                  fmt_ms(g.pct("lag", "p99")))
    console.print(t)
    kt = Table(title="Knee per tier (offered load, all tiers, req/s)")
    for col in ("tier", "verdict", "knee", "confidence", "throughput (a)", "latency (b)", "goodput (c)", "why"):
        kt.add_column(col)
    for tier, k in summary.knees.items():
        kt.add_row(tier, k.verdict, fmt_num(k.value), k.confidence or "–", method_cell(k, "throughput"),
                   method_cell(k, "latency"), method_cell(k, "goodput"), k.note)
    console.print(kt)
    print_roi(summary, console)
    for note in summary.notes:
        if note.startswith("errors by reason"):
            console.print(f"[bold red]{note}[/bold red]")
    for w in summary.warnings:
        console.print(f"[bold yellow]warning:[/bold yellow] {w}")
    console.print(f"[bold]Recommendation:[/bold] {summary.recommendation}")


def print_roi(summary: Summary, console: Console) -> None:
    rt = Table(title="ROI by load band")
    for col in ("band", "tier", "offered", "achieved", "p95 TTFT", "p95 E2E", "errors", "cost/1k req"):
        rt.add_column(col)
    for r in summary.roi:
        rt.add_row(r.band, r.tier, fmt_range(r.offered_min, r.offered_max), fmt_rate(r.achieved_rps),
                   r.p95("ttft"), r.p95("e2e"), fmt_pct(r.error_rate), fmt_cost(r.cost_per_1k))
    console.print(rt)


@app.callback(invoke_without_command=True)
@expand(rate=og.RATE_OPTIONS, mix=og.MIX_OPTIONS, request=og.REQUEST_OPTIONS, replay=og.TRACE_OPTIONS)
def bench(
    ctx: typer.Context,
    host: str = typer.Option(DEFAULT_HOST, "--host", help="Target base URL (engine or gateway); the default is where "
                             "`turbogate serve` listens by default."),
    route: str = opt.ROUTE,
    model: str | None = typer.Option(None, "--model", help="Model name; default: the first of GET /v1/models."),
    rate: og.RateArgs = og.RATE,
    find_knee: bool = typer.Option(False, "--find-knee", help="Step the rate up until saturation, then bisect."),
    step_duration: float = typer.Option(10.0, "--step-duration", help="Seconds per --find-knee probe."),
    knee_growth: float = typer.Option(1.5, "--knee-growth", help="Rate multiplier between --find-knee probes."),
    bisections: int = typer.Option(3, "--bisections", min=0, help="Bisection probes after the first saturation."),
    mix: og.MixArgs = og.MIX,
    tier_via: str = typer.Option("both", "--tier-via", help="Ask the tier by body service_tier, header, or both."),
    request: og.RequestArgs = og.REQUEST,
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", min=1,
                                               help="Cap on requests in flight; waits are recorded as queue time."),
    timeout: float = typer.Option(600.0, "--timeout", help="Per-request timeout (s)."),
    scrape: list[str] = typer.Option([], "--scrape", help="Prometheus URL to sample once a second (repeatable)."),
    metrics: str | None = typer.Option(None, "--metrics", help="gpu-util,mem-fragmentation,p95-latency."),
    slo: str | None = opt.SLO_OPT,
    knee_method: str = opt.KNEE_METHOD,
    knee_k: float = opt.KNEE_K,
    knee_metric: str = opt.KNEE_METRIC,
    fleet_cost: float = opt.FLEET_COST,
    tier_cost: str | None = opt.TIER_COST,
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/bench-<timestamp>)."),
    grace: float = typer.Option(30.0, "--grace", help="On Ctrl-C, seconds to wait for requests in flight."),
    drain: float | None = typer.Option(None, "--drain", min=0.0,
                                       help="After the last send, seconds to wait for requests in flight "
                                            "(default: each one's --timeout); the rest are cancelled."),
    live: bool = typer.Option(True, "--live/--no-live", help="Live progress display."),
    report: bool = typer.Option(True, "--report/--no-report", help="Write report.html."),
    label: str = typer.Option("", "--label", help="Free text stored in summary.json."),
    max_error_rate: float = typer.Option(0.5, "--max-error-rate", min=0.0, max=1.0,
                                         help="Stop (exit 1) when more than this share of the first step's "
                                              "requests fail (429/503 shedding apart)."),
    max_lag_ms: float = typer.Option(10.0, "--max-lag-ms", min=0.0,
                                     help="Warn when the p99 dispatch lag exceeds this: the bench itself was the "
                                          "bottleneck."),
    knee_min_requests: int = opt.KNEE_MIN_REQUESTS,
    workers: int = typer.Option(1, "--workers", min=1,
                                help="Processes that send the schedule, each a disjoint interleaved slice of the same "
                                     "seeded schedule, merged into one run folder; use 2+ when one process lags "
                                     "(p99 dispatch lag per worker is in the notes). Not with --find-knee."),
    ray_address: str | None = typer.Option(None, "--ray", help="Run the --workers as Ray actors spread over the "
                                           "cluster at ADDRESS ('auto', 'ray://host:10001', or 'local'); the hosts' "
                                           "clocks must agree (NTP). Needs pip install 'turbogate[ray]'."),
    replay: og.TraceArgs = og.REPLAY,
) -> None:
    """Run a benchmark (or `turbogate bench compare RUN_A RUN_B`)."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        cfg = build_config(
            host=host, route=route, model=model, **asdict(rate), find_knee=find_knee, step_duration=step_duration,
            knee_growth=knee_growth, bisections=bisections, **asdict(mix), tier_via=tier_via, **asdict(request),
            max_concurrency=max_concurrency, timeout=timeout, scrape=scrape,
            metrics=metrics, slo=slo, knee_method=knee_method, knee_k=knee_k, knee_metric=knee_metric,
            fleet_cost=fleet_cost, tier_cost=tier_cost, out=out, grace=grace, drain=drain, live=live, report=report,
            label=label, max_error_rate=max_error_rate, max_lag_ms=max_lag_ms, knee_min_requests=knee_min_requests,
            workers=workers, ray_address=ray_address, replay=replay)
    except ValueError as exc:
        raise _bad(str(exc)) from None
    console = Console(stderr=False, width=None if Console().is_terminal else 150)
    try:
        result = _run(cfg)
    except RuntimeError as exc:
        raise TurbogateError(str(exc)) from exc
    print_summary(result.summary, console)
    console.print(knee_line(result.summary))
    console.print(f"run folder: {result.run_dir}" + (" (interrupted)" if result.summary.interrupted else ""))
    if result.failure:
        raise BenchFailed(result.failure, hint=f"every request is in {result.run_dir / 'requests.jsonl'}")


def _run(cfg: BenchConfig) -> BenchResult:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.run(run_bench(cfg))
    return uvloop.run(run_bench(cfg))


def check_rates_and_shares(*, qps: float | None, qps_start: float | None, qps_end: float | None,
                           tiers: str | None) -> None:
    """Before any load: every rate given is positive, and the --tiers shares are shares (they add up to 1)."""
    for name, rate in (("--qps", qps), ("--qps-start", qps_start), ("--qps-end", qps_end)):
        if rate is not None and not rate > 0:
            raise ValueError(f"{name} must be > 0 req/s, got {fmt_num(rate)}")
    if tiers:
        total = sum(float(item.partition("=")[2]) for item in tiers.split(","))
        if abs(total - 1) > 1e-6:
            raise BadInput(f"--tiers: the shares add up to {fmt_num(total, 3)}, not 1",
                           "give shares that add up to 1, e.g. --tiers turbo=0.2,standard=0.8")


def build_config(*, host: str, route: str, model: str | None, shape: str | None, qps: float | None,
                 qps_start: float | None, qps_end: float | None, steps: int, duration: float, find_knee: bool,
                 step_duration: float, knee_growth: float, bisections: int, arrivals: str, burstiness: float,
                 prompt_tokens: str, output_tokens: str, dataset: Path | None, no_seed: bool, tiers: str | None,
                 tier_via: str, api_key: list[str], ignore_eos: bool, min_tokens: bool, stream: bool,
                 random_seed: int, max_concurrency: int | None, timeout: float, scrape: list[str],
                 metrics: str | None, slo: str | None, knee_method: str, knee_k: float, knee_metric: str,
                 fleet_cost: float, tier_cost: str | None, out: Path | None, grace: float, live: bool, report: bool,
                 label: str, drain: float | None = None, max_error_rate: float = 0.5, max_lag_ms: float = 10.0,
                 knee_min_requests: int = 20, workers: int = 1, ray_address: str | None = None,
                 replay: og.TraceArgs = og.REPLAY) -> BenchConfig:
    """Validate the CLI options into a :class:`BenchConfig`; ValueError names the bad option."""
    if not host.startswith(("http://", "https://")):
        raise ValueError(f"--host must be a URL like http://127.0.0.1:8000, got {host!r}")
    if not route.startswith("/"):
        raise ValueError(f"--route must start with '/', got {route!r}")
    if tier_via not in TIER_VIA:
        raise ValueError(f"--tier-via must be one of {', '.join(TIER_VIA)}")
    if step_duration <= 0:
        raise ValueError("--step-duration must be > 0")
    if workers < 1:
        raise ValueError("--workers must be >= 1")
    if ray_address is not None and workers < 2:
        raise ValueError("--ray runs the --workers on a cluster: give --workers 2 or more")
    if workers > 1 and find_knee:
        raise ValueError("--workers splits a fixed schedule; --find-knee picks each rate from the last probe, "
                         "so it runs in one process (drop --workers)")
    if grace < 0 or timeout <= 0:
        raise ValueError("--grace must be >= 0 and --timeout > 0")
    load = opt.build_load(
        shape=shape, qps=qps, qps_start=qps_start, qps_end=qps_end, steps=steps, duration=duration,
        arrivals=arrivals, burstiness=burstiness, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        dataset=dataset, no_seed=no_seed, tiers=tiers, n_api_keys=len(api_key), random_seed=random_seed, slo=slo,
        knee_method=knee_method, knee_k=knee_k, knee_metric=knee_metric, fleet_cost=fleet_cost,
        tier_cost=tier_cost, knee_min_requests=knee_min_requests, max_error_rate=max_error_rate, find_knee=find_knee)
    check_rates_and_shares(qps=qps, qps_start=qps_start, qps_end=qps_end, tiers=tiers)
    if replay.trace is not None and find_knee:
        raise ValueError("--trace replays the recorded arrivals; --find-knee chooses its own rates (drop one)")
    load = replay.apply(load)
    target = Target(base_url=host, route=route, model=model or "", api_keys=tuple(api_key), stream=stream,
                    ignore_eos=ignore_eos, min_tokens=min_tokens, tier_via=tier_via, timeout_s=timeout,
                    max_concurrency=max_concurrency)
    cfg = BenchConfig(
        target=target, shape=load.shape, qps=load.qps, qps_start=load.qps_start, qps_end=load.qps_end,
        steps=load.steps, duration_s=load.duration_s, find_knee=find_knee, step_duration_s=step_duration,
        knee_growth=knee_growth, bisections=bisections, arrivals=load.arrivals, workload=load.workload,
        random_seed=load.random_seed, scrape=tuple(scrape), metrics=tuple(parse_metrics_option(metrics)),
        slo=load.slo, knee=load.knee, cost=load.cost, out=out, grace_s=grace, drain_s=drain, live=live,
        report=report, label=label, max_error_rate=max_error_rate, max_lag_s=max_lag_ms / 1000, workers=workers,
        ray_address=ray_address, trace=load.trace)
    return cfg


@app.command("compare")
def compare_cmd(
    run_a: Path = typer.Argument(..., help="First run folder (A)."),
    run_b: Path = typer.Argument(..., help="Second run folder (B)."),
    html_out: Path | None = typer.Option(None, "--html", help="Also write an offline A/B page (plotly) here."),
) -> None:
    """Compare two run folders (bench or sim): knees and whole-run figures per tier, B against A."""
    try:
        a, b = load_run(run_a, with_requests=False, with_samples=False), load_run(run_b, with_requests=False,
                                                                                   with_samples=False)
    except (FileNotFoundError, ValueError) as exc:
        raise BadInput(str(exc), "give two run folders written by turbogate bench or turbogate sim") from None
    t = Table(title=f"A = {run_a} ({a.kind})   B = {run_b} ({b.kind})")
    for col in ("tier", "metric", "A", "B", "B vs A"):
        t.add_column(col)

    for row in compare(a.summary, b.summary):
        d = row.delta_pct
        t.add_row(row.tier, row.metric, fmt_num(row.a, 4), fmt_num(row.b, 4),
                  fmt_signed_pct(None if d is None else d / 100))
    Console(width=None if Console().is_terminal else 150).print(t)
    if html_out is not None:
        from turbogate.results.report import render_compare

        html_out.write_text(render_compare(a.summary, b.summary, str(run_a), str(run_b)), encoding="utf-8")
        typer.echo(f"comparison page: {html_out}")


def turbo_bench_main() -> None:
    """The ``turbo-bench`` console script: the same options as ``turbogate bench``."""
    from turbogate.cli import set_help_width  # here, not at import: turbogate.cli imports this module

    set_help_width()
    app(prog_name="turbo-bench")
