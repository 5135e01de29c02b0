"""The load options ``turbogate bench`` and ``turbogate sim`` share, declared once.

Both commands take the same workload flags (shape, rates, arrivals, lengths, dataset, tier mix,
seed, SLO, knee and cost settings), so one seed gives the same requests measured and simulated.
Each constant is a Typer option declaration used as a parameter default in both commands;
:func:`build_load` validates their values into one :class:`LoadOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from turbogate.bench.arrivals import ARRIVALS, Arrivals
from turbogate.bench.dataset import load_prompts
from turbogate.bench.shapes import SHAPES, Shape, Stepped, make_shape, shape_steps
from turbogate.bench.workload import TierMix, TruncNormal, Workload
from turbogate.perf.default_workload import OUTPUT_SPEC as DEFAULT_OUTPUT
from turbogate.perf.default_workload import PROMPT_SPEC as DEFAULT_PROMPT
from turbogate.results import SLO, CostConfig, KneeSettings, Step
from turbogate.trace.format import TraceError
from turbogate.trace.replay import Replay

ROUTE = typer.Option("/v1/chat/completions", "--route", help="/v1/chat/completions or /v1/completions.")
SHAPE = typer.Option(None, "--shape", help=f"Load shape: {', '.join(SHAPES)}. Default: constant "
                     "with --qps, linear when --qps-start/--qps-end are given.")
QPS = typer.Option(None, "--qps", help="Rate of the constant shape (req/s).")
QPS_START = typer.Option(None, "--qps-start", help="Start rate of a ramp or sweep (and the first probe of "
                         "`turbogate bench --find-knee`).")
QPS_END = typer.Option(None, "--qps-end", help="End rate of a ramp or sweep (and the cap of `turbogate bench "
                       "--find-knee`).")
STEPS = typer.Option(10, "--steps", min=1, help="Sweep steps, or slices of a ramp for per-step stats.")
DURATION = typer.Option(60.0, "--duration", help="Seconds of load.")
ARRIVALS_OPT = typer.Option("poisson", "--arrivals", help=f"Arrival process: {', '.join(ARRIVALS)}.")
BURSTINESS = typer.Option(1.0, "--burstiness", help="Gamma shape (1 = Poisson, < 1 burstier).")
PROMPT_TOKENS = typer.Option(DEFAULT_PROMPT, "--prompt-tokens", help="mean:std:min:max (truncated normal); the default "
                             "is the one workload plan, sim, bench and demo share.")
OUTPUT_TOKENS = typer.Option(DEFAULT_OUTPUT, "--output-tokens", help="mean:std:min:max (truncated normal).")
DATASET = typer.Option(None, "--dataset", help="JSONL (prompt/text/messages) or ShareGPT JSON.")
NO_SEED = typer.Option(False, "--no-seed", help="Do not send a fresh random seed per request.")
TIERS = typer.Option(None, "--tiers", help="Tier mix, e.g. turbo=0.2,standard=0.8.")
API_KEY = typer.Option([], "--api-key", help="API key (repeat for several; picked at random).")
IGNORE_EOS = typer.Option(True, "--ignore-eos/--no-ignore-eos", help="Send ignore_eos (exact lengths).")
MIN_TOKENS = typer.Option(False, "--min-tokens", help="Also send min_tokens = max_tokens.")
STREAM = typer.Option(True, "--stream/--no-stream", help="Stream responses (needed for TTFT/ITL).")
RANDOM_SEED = typer.Option(0, "--random-seed", help="Seed of the schedule and the workload.")
SLO_OPT = typer.Option(None, "--slo", help="Goodput SLOs, e.g. ttft=0.5,tpot=0.05,e2e=10 (seconds).")
KNEE_METHOD = typer.Option("throughput", "--knee-method", help="throughput, latency or goodput.")
KNEE_K = typer.Option(2.0, "--knee-k", help="Latency knee: p95 above k × its low-load value.")
KNEE_METRIC = typer.Option("e2e", "--knee-metric", help="Latency knee metric: ttft, tpot, itl, e2e.")
KNEE_MIN_REQUESTS = typer.Option(20, "--knee-min-requests", min=1,
                                 help="Completed requests a step needs to count for the knee.")
FLEET_COST = typer.Option(1.0, "--fleet-cost-per-hour", help="Cost units per hour of the target fleet.")
TIER_COST = typer.Option(None, "--tier-cost", help="Cost weight per tier, e.g. turbo=2,standard=1.")
TRACE = typer.Option(None, "--trace", help="Replay this trace instead of a load shape: each request at its recorded "
                    "time with its recorded prompt and output tokens (turbogate trace, usage records, Azure LLM CSV, "
                    "vllm bench serve JSON, Mooncake JSONL; docs/bench.md, Replaying a trace).")
TRACE_FORMAT = typer.Option("auto", "--trace-format", help="auto, turbogate, usage, azure, vllm or mooncake.")
SPEEDUP = typer.Option(1.0, "--speedup", help="Replay the trace K times faster (its gaps divided by K).")
WINDOW = typer.Option(None, "--window", help="START:END of the trace to replay, in trace seconds (10m:20m works).")
TIER_BY_TENANT = typer.Option(None, "--tier-by-tenant", help="Tier per trace tenant, e.g. acme=turbo,beta=standard, "
                              "for requests the trace gives no tier; the rest take --tiers by a stable hash.")
REASSIGN_TIERS = typer.Option(False, "--reassign-tiers", help="Ignore the tiers the trace asked for; assign them "
                              "by --tier-by-tenant and --tiers.")


def parse_slo(spec: str | None) -> SLO:
    """``ttft=0.5,tpot=0.05,e2e=10`` in seconds (``500ms`` also accepted)."""
    if not spec:
        return SLO()
    vals: dict[str, float] = {}
    for item in spec.split(","):
        key, sep, raw = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("ttft", "tpot", "e2e"):
            raise ValueError(f"--slo: {item!r} must be ttft=S, tpot=S or e2e=S")
        raw = raw.strip().lower()
        try:
            vals[key] = float(raw[:-2]) / 1000 if raw.endswith("ms") else float(raw.rstrip("s"))
        except ValueError:
            raise ValueError(f"--slo: {raw!r} for {key} is not a number of seconds") from None
        if vals[key] <= 0:
            raise ValueError(f"--slo: {key} must be > 0")
    return SLO(ttft_s=vals.get("ttft"), tpot_s=vals.get("tpot"), e2e_s=vals.get("e2e"))


def parse_cost(spec: str | None, fleet_cost_per_hour: float) -> CostConfig:
    base = CostConfig(fleet_cost_per_hour=fleet_cost_per_hour)
    if not spec:
        return base
    weights = dict(base.tier_weights)
    for item in spec.split(","):
        name, sep, raw = item.partition("=")
        try:
            if not sep:
                raise ValueError
            weights[name.strip().lower()] = float(raw)
        except ValueError:
            raise ValueError(f"--tier-cost: {item!r} must be TIER=WEIGHT (a number)") from None
    return CostConfig(fleet_cost_per_hour=fleet_cost_per_hour, tier_weights=weights)


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """The validated shared options: what load to offer and how to judge it."""

    shape: str
    qps: float
    qps_start: float
    qps_end: float
    steps: int
    duration_s: float
    arrivals: Arrivals
    workload: Workload
    random_seed: int
    slo: SLO
    knee: KneeSettings
    cost: CostConfig
    trace: Replay | None = None  # a replayed trace (shape "trace"): its requests, not the shape's
    rates: tuple[float, ...] = ()  # held steps at these rates, each duration_s / len(rates) (the demo's own steps)

    def make_shape(self) -> Shape:
        if self.rates:
            return Stepped(self.rates, self.duration_s)
        return make_shape(self.shape, start=self.qps if self.shape == "constant" else self.qps_start,
                          end=self.qps_end, duration=self.duration_s, steps=self.steps)

    def shape_and_steps(self) -> tuple[Shape, list[Step]]:
        shape = self.make_shape()
        return shape, shape_steps(shape, self.steps)


def build_load(*, shape: str | None, qps: float | None, qps_start: float | None, qps_end: float | None,
               steps: int, duration: float, arrivals: str, burstiness: float, prompt_tokens: str,
               output_tokens: str, dataset: Path | None, no_seed: bool, tiers: str | None, n_api_keys: int,
               random_seed: int, slo: str | None, knee_method: str, knee_k: float, knee_metric: str,
               fleet_cost: float, tier_cost: str | None, knee_min_requests: int = 20, max_error_rate: float = 0.5,
               find_knee: bool = False) -> LoadOptions:
    """Validate the shared options; ValueError names the bad option.  The rates are checked
    now (before anything starts) unless ``find_knee`` chooses them later.  A step whose requests
    fail (shedding apart) beyond ``max_error_rate`` does not vote for the knee."""
    if shape is None:
        shape = "linear" if (qps_start is not None or qps_end is not None) and qps is None else "constant"
    if shape == "constant" and qps is None:
        qps = qps_start if qps_start is not None else 1.0
    if shape != "constant" and not find_knee and (qps_start is None or qps_end is None):
        raise ValueError(f"--shape {shape} needs --qps-start and --qps-end")
    if duration <= 0:
        raise ValueError("--duration must be > 0")
    if knee_metric not in ("ttft", "tpot", "itl", "e2e"):
        raise ValueError("--knee-metric must be one of ttft, tpot, itl, e2e")
    workload = Workload(
        prompt_tokens=TruncNormal.parse(prompt_tokens, "--prompt-tokens"),
        output_tokens=TruncNormal.parse(output_tokens, "--output-tokens"),
        tiers=TierMix.parse(tiers), n_api_keys=n_api_keys, per_request_seed=not no_seed,
        dataset=load_prompts(dataset) if dataset is not None else ())
    load = LoadOptions(
        shape=shape, qps=qps if qps is not None else 1.0, qps_start=qps_start if qps_start is not None else 1.0,
        qps_end=qps_end if qps_end is not None else 0.0, steps=steps, duration_s=duration,
        arrivals=Arrivals(arrivals, burstiness), workload=workload, random_seed=random_seed, slo=parse_slo(slo),
        knee=KneeSettings(method=knee_method, k=knee_k, metric=knee_metric, min_requests=knee_min_requests,
                          max_error_rate=max_error_rate),
        cost=parse_cost(tier_cost, fleet_cost))
    if not find_knee:
        load.make_shape()
    return load


def with_trace(load: LoadOptions, path: Path, *, fmt: str = "auto", speedup: float = 1.0, window: str | None = None,
               tier_by_tenant: str | None = None, reassign_tiers: bool = False) -> LoadOptions:
    """``load`` replaying the trace at ``path`` (its --tiers the share for requests without a tier,
    its --steps the slices of the replay); ValueError names the bad option."""
    from dataclasses import replace

    from turbogate.trace.importers import load_trace
    from turbogate.trace.replay import ReplayOptions, parse_tier_by_tenant, parse_window, plan_replay

    try:
        opts = ReplayOptions(speedup=speedup, window=parse_window(window), share=load.workload.tiers,
                             by_tenant=parse_tier_by_tenant(tier_by_tenant), reassign=reassign_tiers, steps=load.steps)
        replay = plan_replay(load_trace(path, fmt), opts)
    except TraceError as exc:
        raise ValueError(f"{exc} ({exc.hint})" if exc.hint else str(exc)) from None
    return replace(load, shape="trace", duration_s=replay.duration_s, trace=replay)
