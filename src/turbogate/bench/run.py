"""A whole benchmark: build the schedule, run it with collectors and a live display, write the run."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import signal
import sys
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from turbogate.bench.arrivals import Arrivals, Scheduled, build_schedule
from turbogate.bench.collectors import Collectors, Nvml, parse_prometheus
from turbogate.bench.failures import BenchFailed, first_step_failure, hint, reasons, reasons_line, run_failure
from turbogate.bench.findknee import KneeSearch
from turbogate.bench.live import LiveDisplay
from turbogate.bench.machine import LocalCpu, apply_verdict, bound_line, judge, with_cpu
from turbogate.bench.runner import Runner, Target
from turbogate.bench.shapes import Constant, Stepped, make_shape, shape_steps
from turbogate.bench.workers import RayWorkerPool, WorkerJob, WorkerPool, drive, lag_notes, merge, split
from turbogate.bench.workload import Workload
from turbogate.errors import BadInput
from turbogate.results import (
    ALL,
    SLO,
    CostConfig,
    KneeSettings,
    RequestRecord,
    Sample,
    Step,
    Summary,
    summarize,
    write_run,
)
from turbogate.results.fmt import fmt_ms, fmt_num
from turbogate.results.knee import probe_state
from turbogate.results.stats import step_stats
from turbogate.trace.replay import Replay, bench_schedule


@dataclass
class BenchConfig:
    target: Target  # where and how to send; an empty ``model`` is discovered from /v1/models
    shape: str = "constant"
    qps: float = 1.0
    qps_start: float = 1.0
    qps_end: float = 10.0
    steps: int = 10
    duration_s: float = 60.0
    find_knee: bool = False
    step_duration_s: float = 10.0
    knee_growth: float = 1.5
    bisections: int = 3
    arrivals: Arrivals = field(default_factory=Arrivals)
    workload: Workload = field(default_factory=Workload)
    random_seed: int = 0
    scrape: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    slo: SLO = field(default_factory=SLO)
    knee: KneeSettings = field(default_factory=KneeSettings)
    cost: CostConfig = field(default_factory=CostConfig)
    out: Path | None = None
    grace_s: float = 30.0
    drain_s: float | None = None  # after the schedule: wait this long for in-flight (None: their timeout)
    live: bool = True
    report: bool = True
    label: str = ""
    max_error_rate: float = 0.5  # a first step failing more than this (shedding apart) stops the run
    max_lag_s: float = 0.010  # p99 dispatch lag above this: the load generator was the bottleneck
    workers: int = 1  # processes sending slices of one schedule (bench/workers.py)
    ray_address: str | None = None  # run the workers as Ray actors on this cluster
    rates: tuple[float, ...] = ()  # held steps at these rates, each duration_s / len(rates) (the demo's own steps)
    trace: Replay | None = None  # replay this trace (trace/replay.py) instead of the shape

    def describe(self) -> dict[str, Any]:
        """The settings as JSON for summary.json (API keys counted, never written)."""
        t = self.target
        d: dict[str, Any] = {
            "host": t.base_url, "route": t.route, "model": t.model or None, "api_keys": len(t.api_keys),
            "stream": t.stream, "ignore_eos": t.ignore_eos, "min_tokens": t.min_tokens,
            "tier_via": t.tier_via, "timeout_s": t.timeout_s, "drain_s": self.drain_s,
            "max_concurrency": t.max_concurrency,
            "shape": "find-knee" if self.find_knee else self.shape, "qps": self.qps, "qps_start": self.qps_start,
            "qps_end": self.qps_end, "steps": self.steps, "duration_s": self.duration_s,
            "step_duration_s": self.step_duration_s, "arrivals": self.arrivals.kind,
            "burstiness": self.arrivals.burstiness, "random_seed": self.random_seed,
            "prompt_tokens": asdict(self.workload.prompt_tokens), "output_tokens": asdict(self.workload.output_tokens),
            "tiers": dict(self.workload.tiers.weights), "per_request_seed": self.workload.per_request_seed,
            "dataset_prompts": len(self.workload.dataset), "scrape": list(self.scrape), "metrics": list(self.metrics),
            "label": self.label, "max_error_rate": self.max_error_rate, "max_lag_ms": self.max_lag_s * 1000,
            "workers": self.workers, "ray": self.ray_address,
        }
        if self.trace is not None:
            d["trace"] = self.trace.describe()
        return d


async def discover_model(session: aiohttp.ClientSession, host: str, api_key: str | None = None,
                         model: str = "") -> str:
    """The model to load: ``model`` once GET /v1/models shows the target serves it (refused at once,
    before any load, when the list lacks it or the key is refused), else the list's first."""
    url = host.rstrip("/") + "/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status == 401:
                raise BadInput(f"GET {url} answered HTTP 401: the target "
                               + ("refused the key" if api_key else "wants an API key"),
                               "check --api-key" if api_key else "pass --api-key KEY")
            if r.status != 200:
                if model:  # a target without the list: the model cannot be checked beforehand
                    return model
                raise BenchFailed(f"GET {url} answered HTTP {r.status}", hint="pass --model")
            data = await r.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise BenchFailed(f"cannot reach {url} ({type(exc).__name__}: {exc})", hint="is the target up at --host?"
                          ) from None
    listed = data.get("data") if isinstance(data, dict) else None
    ids = [str(m["id"]) for m in listed or () if isinstance(m, dict) and "id" in m]
    if model and ids and model not in ids:
        raise BadInput(f"the target does not serve the model {model!r} (GET {url} lists {', '.join(ids)})",
                       "pass --model with one of those")
    if model:
        return model
    if not ids:
        raise BenchFailed(f"{url} lists no models", hint="pass --model")
    return ids[0]


async def discover_replicas(session: aiohttp.ClientSession, host: str) -> list[str]:
    """The engine URLs behind a turbogate gateway, from the ``replica`` label of its public /metrics
    (``turbogate_replica_healthy``); empty for anything else (an engine, an unreachable page)."""
    url = host.rstrip("/") + "/metrics"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
            if r.status != 200:
                return []
            text = await r.text()
    except (aiohttp.ClientError, TimeoutError):
        return []
    found = {s.labels.get("replica", "") for s in parse_prometheus(text, 0.0, url)
             if s.name == "turbogate_replica_healthy"}
    return sorted(u for u in found if u.startswith(("http://", "https://")))


@dataclass
class BenchResult:
    run_dir: Path
    summary: Summary
    records: list[RequestRecord]
    samples: list[Sample]
    notices: list[str]
    failure: str | None = None  # why the run stopped early or failed as a whole (the CLI exits non-zero)


async def _find_knee(cfg: BenchConfig, runner: Runner, rng: random.Random, steps: list[Step],
                     notes: list[str]) -> str | None:
    """Probe rates as :class:`KneeSearch` proposes; each probe is judged by the knee module's own step test
    among the probes so far (as the summary will judge it).  Returns a failure that stops the run, if any."""
    search = KneeSearch(start=cfg.qps_start, growth=cfg.knee_growth, bisections=cfg.bisections,
                        max_rate=max(cfg.qps_end, cfg.qps_start) if cfg.qps_end > cfg.qps_start else 1e6)
    say = functools.partial(print, file=sys.stderr, flush=True)
    while not runner.stop.is_set() and (rate := search.next_rate()) is not None:
        start = runner.now() + 0.1
        step = Step(len(steps), start, start + cfg.step_duration_s, rate)
        steps.append(step)
        shape = Constant(rate, cfg.step_duration_s)
        local = [Step(0, 0.0, cfg.step_duration_s, rate)]
        sched = build_schedule(shape, cfg.arrivals, cfg.workload, local, rng, offset=start, step_offset=step.index)
        await runner.execute(sched, grace_s=cfg.grace_s, drain_s=cfg.drain_s)
        if step.index == 0 and (why := first_step_failure(runner.records, 0, cfg.max_error_rate)):
            return why
        probes = step_stats(runner.records, steps, cfg.slo)
        state = probe_state(probes, step.index, ALL, cfg.knee, cfg.slo.is_set())
        g = next(st.tiers[ALL] for st in probes if st.step.index == step.index)
        search.observe(rate, state == "fail")
        p95 = g.pct(cfg.knee.metric)
        say(f"find-knee: {fmt_num(rate)} req/s offered ({fmt_num(g.offered_rps)} as scheduled) → "
            f"{fmt_num(g.achieved_rps)} achieved, p95 "
            f"{cfg.knee.metric} {'–' if p95 is None else fmt_ms(p95)} → "
            + {"fail": "saturated", "ok": "ok", "thin": f"too few requests (< {cfg.knee.min_requests})",
               "errors": "errors"}[state])
    lo, hi = search.bracket()
    notes.append(f"find-knee: {search.probes} probes; last rate that kept up {fmt_num(lo)}, lowest confirmed "
                 f"saturated {fmt_num(hi)} req/s")
    return None


async def _watch_first_step(cfg: BenchConfig, runner: Runner, first: Step, failure: list[str]) -> None:
    """Stop the run when its first step's requests mostly fail (a missing key must not become a knee)."""
    while not runner.stop.is_set():
        await asyncio.sleep(0.25)
        why = first_step_failure(runner.records, first.index, cfg.max_error_rate)
        if why is not None:
            failure.append(why)
            runner.stop.set()
            return
        if runner.now() > first.end_s + 2.0:
            return


def _bench_series(runner: Runner, with_p95: bool) -> Any:
    def series(t: float) -> list[Sample]:
        st = runner.state
        out = [Sample(t, "bench", "bench_offered_rps", st.offered_rps),
               Sample(t, "bench", "bench_achieved_rps", st.achieved_rps(t)),
               Sample(t, "bench", "bench_in_flight", float(st.in_flight))]
        p95 = runner.p95_e2e() if with_p95 else None
        if p95 is not None:
            out.append(Sample(t, "bench", "bench_p95_e2e_s", p95))
        return out

    return series


def _workers_wait_s(cfg: BenchConfig, schedule: list[Scheduled]) -> float:
    """How long the parent waits for the workers' records: the schedule, then the drain (or a
    request's timeout), the grace after a Ctrl-C, and a minute to spare."""
    end = schedule[-1].t if schedule else 0.0
    return end + (cfg.drain_s if cfg.drain_s is not None else cfg.target.timeout_s) + cfg.grace_s + 60.0


async def run_bench(cfg: BenchConfig, *, echo: Any = None) -> BenchResult:
    """Run the benchmark ``cfg`` describes and write its run folder."""
    say = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
    notices: list[str] = []
    notes: list[str] = []
    failure: list[str] = []
    rng = random.Random(cfg.random_seed)
    nvml: Nvml | None = None
    if "gpu-util" in cfg.metrics:
        nvml, msg = Nvml.open()
        notices.append(msg)
        say(msg)
    scrape = list(cfg.scrape)
    if cfg.trace is not None:
        steps = list(cfg.trace.steps)
        schedule: list[Scheduled] = bench_schedule(
            cfg.trace, chat=cfg.target.chat, seed=cfg.random_seed, n_api_keys=len(cfg.target.api_keys),
            per_request_seed=cfg.workload.per_request_seed)
        notes.extend(cfg.trace.notes)
    elif not cfg.find_knee:
        shape = Stepped(cfg.rates, cfg.duration_s) if cfg.rates else \
            make_shape(cfg.shape, start=cfg.qps if cfg.shape == "constant" else cfg.qps_start,
                       end=cfg.qps_end, duration=cfg.duration_s, steps=cfg.steps)
        steps = shape_steps(shape, cfg.steps)
        schedule = build_schedule(shape, cfg.arrivals, cfg.workload, steps, rng)
    else:
        steps, schedule = [], []
    started_at = datetime.now(UTC)
    out_dir = cfg.out or Path("runs") / f"bench-{started_at.strftime('%Y%m%d-%H%M%S')}"
    async with aiohttp.ClientSession() as probe_session:
        t = cfg.target
        model = await discover_model(probe_session, t.base_url, t.api_keys[0] if t.api_keys else None, t.model)
        replicas = await discover_replicas(probe_session, t.base_url)
    own = cfg.target.base_url.rstrip("/") + "/metrics"
    if replicas:  # a turbogate gateway: scrape it and the engines behind it (KV use, fragmentation)
        scrape += [own, *(u.rstrip("/") + "/metrics" for u in replicas)]
        notes.append(f"target is a turbogate gateway with {len(replicas)} replicas; scraping "
                     + ", ".join(replicas))
    elif "mem-fragmentation" in cfg.metrics:
        scrape.append(own)
    target = replace(cfg.target, model=model)
    loop = asyncio.get_running_loop()
    interrupts = 0
    pool: WorkerPool | RayWorkerPool | None = None
    start_wall: float | None = None
    if cfg.workers > 1:  # find-knee is refused with workers by build_config
        jobs = [WorkerJob(k, target, items, cfg.grace_s, cfg.drain_s)
                for k, items in enumerate(split(schedule, cfg.workers))]
        pool = RayWorkerPool(jobs, cfg.ray_address) if cfg.ray_address else WorkerPool(jobs)
        try:
            start_wall = await pool.start()
        except BaseException:
            pool.close()
            raise
        where = f" on the Ray cluster {cfg.ray_address}" if cfg.ray_address else ""
        say(f"bench: {cfg.workers} workers{where} send the schedule in interleaved slices")
    async with Runner(target, start_wall=start_wall) as runner:

        def on_sigint() -> None:
            nonlocal interrupts
            interrupts += 1
            runner.stop.set()
            if interrupts == 1:
                say(f"\nstopping: no new requests; waiting up to {cfg.grace_s:.0f}s for those in flight "
                    "(Ctrl-C again to cancel them now)")
                if pool is not None:
                    pool.stop()
            else:
                runner.cancel_in_flight()
                if pool is not None:
                    pool.cancel_in_flight()

        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        collectors = Collectors(runner.session, scrape, runner.now, nvml=nvml,
                                bench_series=with_cpu(_bench_series(runner, "p95-latency" in cfg.metrics),
                                                      LocalCpu(cfg.target.base_url)))
        display = LiveDisplay(runner, None if cfg.find_knee else cfg.duration_s, enabled=cfg.live)
        collectors.start()
        display.start()
        try:
            if cfg.find_knee:
                why = await _find_knee(cfg, runner, rng, steps, notes)
                failure += [why] if why else []
            elif pool is not None:
                runner.state.scheduled = len(schedule)
                per_worker = await drive(pool, runner, _workers_wait_s(cfg, schedule))
                runner.records = merge(per_worker)
                notes.extend(lag_notes(per_worker))
                if why := first_step_failure(runner.records, steps[0].index, cfg.max_error_rate):
                    failure.append(why)
            else:
                watch = asyncio.create_task(_watch_first_step(cfg, runner, steps[0], failure))
                try:
                    await runner.execute(schedule, grace_s=cfg.grace_s, drain_s=cfg.drain_s)
                finally:
                    watch.cancel()
        finally:
            if pool is not None:
                pool.close()
            await display.stop()
            await collectors.stop()
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
        duration = max(runner.now(), steps[-1].end_s if steps else 0.0)
        records = sorted(runner.records, key=lambda r: r.id)
        started_iso = datetime.fromtimestamp(runner.t0_wall, UTC).isoformat()
    for url, err in collectors.errors.items():
        notes.append(f"scrape {url}: {err}")
    if "mem-fragmentation" in cfg.metrics and not any(
            s.name in ("turbogate_emulator_kv_fragmentation", "vllm:kv_cache_fragmentation")
            for s in collectors.samples):
        msg = "mem-fragmentation: the target exposes no KV fragmentation gauge at /metrics"
        notices.append(msg)
        say(msg)
    notes.extend(notices)
    counts = reasons(records)
    if counts:
        notes.append(f"errors by reason: {reasons_line(counts)} ({hint(counts.most_common(1)[0][0])})")
    interrupted = runner.stop.is_set()
    config = cfg.describe() | {"model": model}
    run_failed = None if failure else run_failure(records, cfg.max_error_rate)
    warnings = [f"stopped: {why}" for why in failure] + ([f"failed: {run_failed}"] if run_failed else [])
    summary = summarize(records, steps, kind="bench", started_at=started_iso, duration_s=duration, config=config,
                        slo=cfg.slo, knee_settings=cfg.knee, cost=cfg.cost, interrupted=interrupted, notes=notes,
                        warnings=warnings, max_lag_s=cfg.max_lag_s)
    summary = apply_verdict(summary, judge(summary, collectors.samples, cfg.max_lag_s))
    write_run(out_dir, records, collectors.samples, summary, report=cfg.report)
    return BenchResult(out_dir, summary, records, collectors.samples, notices, failure[0] if failure else run_failed)


def knee_line(summary: Summary) -> str:
    """``knee — fleet: 9.6 req/s (throughput, high confidence); turbo: none up to 17 req/s; …``"""
    if (bound := bound_line(summary)) is not None:
        return f"knee — {bound}"
    parts = []
    for tier, k in summary.knees.items():
        label = "fleet" if tier == ALL else tier
        if k.value is not None:
            text = f"{fmt_num(k.value)} req/s ({k.used}, {k.confidence} confidence)"
        elif k.verdict == "none":
            text = "none in range"
        else:
            text = f"inconclusive ({k.note})"
        parts.append(f"{label}: {text}")
    return "knee — " + "; ".join(parts)

