"""``turbogate sim``: the fleet simulator (virtual time over sched/ + engine/)."""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.console import Console

from turbogate.bench import option_groups as og
from turbogate.bench import options as opt
from turbogate.bench.cli import print_summary
from turbogate.bench.run import knee_line
from turbogate.config import load_config
from turbogate.errors import BadInput, ConfigError
from turbogate.optgroup import expand
from turbogate.plan.profile_opts import gpu_profile_option
from turbogate.results import Summary, summarize, write_run
from turbogate.results.io import REQUESTS, REQUESTS_GZ
from turbogate.sim.baselines import baseline_rows, print_baselines, write_baselines
from turbogate.sim.build import POLICIES, SimConfig, build_replicas
from turbogate.sim.fleet import Fleet, load_fleet
from turbogate.sim.progress import Bar, note
from turbogate.sim.run import SimOutcome, default_out, simulate, write_sim
from turbogate.sim.sweep import combine, default_jobs, parse_sweep, point_config, run_points
from turbogate.trace.whatif import print_what_if, run_what_if

#: Default warm-up of a sweep point: the adaptive concurrency limit's slow start (×1.5 per
#: scrape from ``concurrency.initial``) reaches a 256-seq engine in about 9 scrapes; 30 s leaves
#: room for the 1 s scrapes to settle the limit, service-time and rate estimates too.
SWEEP_WARMUP_S = 30.0


@expand(rate=og.RATE_OPTIONS, mix=og.MIX_OPTIONS, request=og.REQUEST_OPTIONS, replay=og.TRACE_OPTIONS)
def sim(
    config: Path = typer.Option(..., "--config", help="The gateway's own config file (tiers, tenants, pools)."),
    fleet: list[Path] = typer.Option(..., "--fleet", help="Fleet file: replicas per pool, network, failures "
                                     "(docs/sim.md). Repeat it to run the same requests on each fleet and compare "
                                     "them in one table (what if)."),
    model: str | None = typer.Option(None, "--model", help="Model asked for; default: the first fleet pool's."),
    route: str = opt.ROUTE,
    rate: og.RateArgs = og.RATE,
    mix: og.MixArgs = og.MIX,
    request: og.RequestArgs = og.REQUEST,
    slo: str | None = opt.SLO_OPT,
    knee_method: str = opt.KNEE_METHOD,
    knee_k: float = opt.KNEE_K,
    knee_metric: str = opt.KNEE_METRIC,
    knee_min_requests: int = opt.KNEE_MIN_REQUESTS,
    fleet_cost: float = opt.FLEET_COST,
    tier_cost: str | None = opt.TIER_COST,
    policy: str = typer.Option("turbogate", "--policy", help=f"Gateway policy: {', '.join(POLICIES)}."),
    compare_policies: bool = typer.Option(False, "--compare-policies",
                                          help="Run the workload under every policy; print a table per load level."),
    sweep: str | None = typer.Option(None, "--sweep", help="qps=START:STOP:STEP — one constant-rate run per point "
                                     "(each --duration long), in parallel; the knee over the points."),
    warmup: float | None = typer.Option(
        None, "--warmup", min=0, help="Seconds of unmeasured traffic at the run's starting rate before it, so "
        "the gateway's learned state (each replica's concurrency limit, service times) is warm when measuring "
        f"starts. Default: {SWEEP_WARMUP_S:g} s for each --sweep point (a steady-state point), 0 for a single run "
        "(as a bench run meets a freshly started gateway)."),
    jobs: int = typer.Option(0, "--jobs", min=0, help="Parallel processes for sweeps / policies (0: all cores)."),
    ray_address: str | None = typer.Option(None, "--ray", help="Run the runs on a Ray cluster at ADDRESS "
                                           "('auto', 'ray://host:10001', or 'local' for a local instance)."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/sim-<timestamp>)."),
    report: bool = typer.Option(True, "--report/--no-report", help="Write report.html."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar (virtual time or runs done); "
                                  "a line every 10 s on stderr when it is not a terminal."),
    full_records: bool = typer.Option(False, "--full-records", help="Write requests.jsonl uncompressed, and each "
                                      "sweep point's own records too. Default: requests.jsonl.gz in the run folder, "
                                      "a sweep point's folder its summary only (its records are in the combined run)."),
    label: str = typer.Option("", "--label", help="Free text stored in summary.json."),
    replay: og.TraceArgs = og.REPLAY,
    engine_profile: str | None = typer.Option(None, "--engine-profile", help="Engine profile for every replica "
                                              "group (default: each group's engine_profile, vllm-v1 unless set)."),
    gpu_profile: Path | None = gpu_profile_option(),
) -> None:
    """Simulate a fleet bigger than one machine with the gateway's own scheduling code."""
    try:
        if route not in ("/v1/chat/completions", "/v1/completions"):
            raise ValueError("--route must be /v1/chat/completions or /v1/completions")
        load = opt.build_load(
            **asdict(rate), **asdict(mix), n_api_keys=len(request.api_key), random_seed=request.random_seed,
            slo=slo, knee_method=knee_method, knee_k=knee_k, knee_metric=knee_metric, fleet_cost=fleet_cost,
            tier_cost=tier_cost, knee_min_requests=knee_min_requests)
        if replay.trace is not None and (sweep or warmup):
            raise ValueError("--trace replays recorded arrivals: drop --sweep and --warmup")
        load = replay.apply(load)
        if len(fleet) > 1 and (sweep or compare_policies):
            raise ValueError("several --fleet files compare fleets: drop --sweep and --compare-policies")
        if policy not in POLICIES:
            raise ValueError(f"--policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        points = parse_sweep(sweep) if sweep else None
        fleets = [(p.stem, profiled_fleet(load_fleet(p), engine_profile, gpu_profile)) for p in fleet]
        base = SimConfig(gateway=load_config(config), fleet=fleets[0][1], load=load, model=model,
                         policy=policy, chat=route.endswith("chat/completions"), stream=request.stream,
                         ignore_eos=request.ignore_eos, min_tokens=request.min_tokens, api_keys=tuple(request.api_key),
                         label=label,
                         warmup_s=warmup if warmup is not None else SWEEP_WARMUP_S if points else 0.0)
        if load.trace is not None:  # the report then draws the trace's arrivals and each tier's TTFT over time
            base = replace(base, extra={**base.extra, "trace": load.trace.describe()})
        for _, f in fleets:
            build_replicas(replace(base, fleet=f))  # fail on a bad fleet before anything runs
        base.resolved_model()
    except StopIteration:  # a bad option or file goes up as it is: one line, exit 2 (clierrors.py)
        raise BadInput("the fleet's first pool serves no model", "name one under the pool in the fleet file") from None
    console = Console(width=None if Console().is_terminal else 150)
    out_dir = out or default_out()
    if len(fleets) > 1:
        with Bar(progress, "fleets", len(fleets)) as advance:
            table = run_what_if(base, fleets, out_dir, jobs=jobs or default_jobs(), report=report,
                                on_done=lambda i: advance(1))
        print_what_if(table, console, slo or "none set: every success")
        console.print(f"run folders: {out_dir}/<fleet>; the table: {out_dir / 'whatif.json'}")
        return
    policies = list(POLICIES) if compare_policies else [policy]
    levels: list[float | None] = list(points) if points else [None]
    runs = [(p, q) for p in policies for q in levels]
    configs = [_config(base, p, q) for p, q in runs]
    try:
        if len(configs) == 1 and ray_address is None:
            outcomes = [_one_with_bar(configs[0], progress)]
        else:
            with Bar(progress, "runs", len(configs)) as advance:
                outcomes = run_points(configs, jobs=jobs or default_jobs(), ray_address=ray_address,
                                      on_done=lambda i: advance(1))
    except ConfigError as exc:
        raise BadInput(f"bad config: {exc}", "fix the field it names in the gateway or fleet file") from None
    summaries: dict[str, Summary] = {}
    for p in policies:
        folder = out_dir / p if compare_policies else out_dir
        mine = [(q, c, o) for (pp, q), c, o in zip(runs, configs, outcomes, strict=True) if pp == p]
        note(progress, f"writing {folder}")
        summaries[p] = _write(folder, base, p, mine, points, report, full_records)
    if compare_policies:
        rows = baseline_rows(summaries)
        print_baselines(rows, console)
        write_baselines(out_dir, rows)
    else:
        print_summary(summaries[policy], console)
        console.print(knee_line(summaries[policy]))
    console.print(f"run folder: {out_dir}")


def profiled_fleet(fleet: Fleet, engine_profile: str | None, gpu_profile: Path | None) -> Fleet:
    """Every replica group under ``--engine-profile``, and on ``--gpu-profile``'s measured GPU where it is that GPU."""
    from turbogate.perf import get_gpu
    from turbogate.perf.profiles import get_profile
    from turbogate.plan.profile_cli import load_gpu_profile

    update: dict[str, object] = {"engine_profile": get_profile(engine_profile).name} if engine_profile else {}
    prof = load_gpu_profile(gpu_profile) if gpu_profile is not None else None
    pools = []
    for pool in fleet.pools:
        groups = []
        for g in pool.replicas:
            measured = ({"gpu_bw_efficiency": prof.bw_efficiency, "gpu_mfu": prof.mfu}
                        if prof is not None and get_gpu(g.gpu).name == prof.gpu_name else {})
            groups.append(g.model_copy(update={**update, **measured}))
        pools.append(pool.model_copy(update={"replicas": groups}))
    return fleet.model_copy(update={"pools": pools})


def _config(base: SimConfig, policy: str, qps: float | None) -> SimConfig:
    c = replace(base, policy=policy)
    return c if qps is None else point_config(c, qps)


def _write(folder: Path, base: SimConfig, policy: str, runs: list[tuple[float | None, SimConfig, SimOutcome]],
           points: list[float] | None, report: bool, full_records: bool) -> Summary:
    records_file = REQUESTS if full_records else REQUESTS_GZ
    if points is None:
        _, c, o = runs[0]
        return write_sim(folder, c, o, report=report, records_file=records_file)
    for q, c, o in runs:
        write_sim(folder / "points" / f"qps-{q or 0:g}", c, o, report=False,
                  records_file=REQUESTS if full_records else None)
    records, steps, duration = combine(points, [o for _, _, o in runs])
    sc = replace(base, policy=policy, extra={**base.extra, "sweep": [float(q) for q in points]})
    summary = summarize(records, steps, kind="sim", started_at=_now(), duration_s=duration, config=sc.describe(),
                        slo=sc.load.slo, knee_settings=sc.load.knee, cost=sc.load.cost,
                        notes=[f"sweep of {len(points)} points, one constant-rate run each; points/ holds each "
                               f"point's {'run' if full_records else 'summary'}"])
    write_run(folder, records, (), summary, report=report, records_file=records_file)
    return summary


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _one_with_bar(sc: SimConfig, enabled: bool) -> SimOutcome:
    total = sc.load.duration_s
    with Bar(enabled, "virtual s", total) as advance:
        done = [0.0]

        def tick(t: float, _total: float) -> None:
            advance(t - done[0])
            done[0] = t

        return simulate(sc, tick if enabled else None)

