"""The candidates of ``plan size`` (perf catalog) and their confirmation in the simulator.

``candidates`` builds a :class:`~turbogate.plan.size.Candidate` for every GPU × TP that holds the
model; :class:`SimMeasure` runs a fleet of ``replicas`` of one candidate through
:func:`turbogate.sim.run.simulate` (the gateway's own flow and the stepped engines, in virtual
time, in this process) at the peak, after a warm-up, and reads each tier's p95 from its records.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from turbogate.bench.options import LoadOptions, build_load
from turbogate.config import GatewayConfig, hash_key, parse_config
from turbogate.errors import CatalogError, ConfigError
from turbogate.perf import GPUS, get_gpu
from turbogate.perf.profiles import DEFAULT_PROFILE
from turbogate.plan.knee import predicted_knee
from turbogate.plan.latency import latency_model
from turbogate.plan.size import TIERS, Candidate, Measured, SizeInputs
from turbogate.results import RequestRecord
from turbogate.results.stats import Dist
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import Fleet, ReplicaGroup, parse_fleet
from turbogate.sim.replica import group_deployment
from turbogate.sim.run import simulate

#: Tensor-parallel sizes tried by default: one GPU up to a whole 8-GPU node.
DEFAULT_TPS: tuple[int, ...] = (1, 2, 4, 8)
#: A GPU counts as a data-centre GPU, a default candidate, when the catalog gives it a GPU-to-GPU
#: fabric of at least this many bytes/s one way (NVLink / Infinity Fabric class: tensor parallelism
#: runs well across it); PCIe-only cards and TPUs are candidates only by name (``--gpus``).
DATA_CENTRE_LINK_BYTES_S = 300e9
#: Unmeasured traffic before each simulated fleet is judged: the gateway learns each replica's
#: concurrency limit by slow start (docs/sim.md, "Warm-up"), as a sweep point does.
WARMUP_S = 30.0
#: Requests of the smallest tier a judged window should hold, so its p95 rests on enough of them.
TIER_REQUESTS = 400
MIN_WINDOW_S, MAX_WINDOW_S = 30.0, 300.0
API_KEY = "sk-plan-size"  # the simulated tenant's key (tests replay the same runs through `turbogate sim`)
POOL = "plan"


def data_centre_gpus() -> tuple[str, ...]:
    return tuple(g.name for g in GPUS.values() if g.link_bandwidth >= DATA_CENTRE_LINK_BYTES_S)


@dataclass(frozen=True, slots=True)
class Engine:
    """What every replica runs: the model and the engine's settings (as a fleet file's replica group)."""

    model: str
    prompt_tokens: int
    output_tokens: int
    dtype: str = "bf16"
    kv_dtype: str = "auto"
    gpu_mem_util: float = 0.9
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    knee_factor: float = 2.0
    engine_profile: str = DEFAULT_PROFILE
    measured_gpu: str | None = None  # a GPU profile's GPU (``plan profile``): its measured factors apply there
    gpu_bw_efficiency: float | None = None
    gpu_mfu: float | None = None

    def group(self, gpu: str, tp: int, count: int = 1) -> dict[str, Any]:
        """The fleet file's replica group of ``count`` × (``gpu``, ``tp``) running this engine."""
        measured = ({"gpu_bw_efficiency": self.gpu_bw_efficiency, "gpu_mfu": self.gpu_mfu}
                    if self.measured_gpu is not None and get_gpu(gpu).name == self.measured_gpu else {})
        return {"count": count, "gpu": gpu, "model": self.model, "tp": tp, "max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.max_num_batched_tokens, "dtype": self.dtype,
                "kv_cache_dtype": self.kv_dtype, "gpu_memory_utilization": self.gpu_mem_util,
                "engine_profile": self.engine_profile, **measured}


def candidates(engine: Engine, gpus: Iterable[str], tps: Sequence[int]) -> tuple[list[Candidate], list[str]]:
    """Every GPU × TP that holds the model, and a line for each that does not.  Each candidate's closed
    form runs on the deployment the simulator builds from its fleet file's replica group (same profile)."""
    out: list[Candidate] = []
    left_out: list[str] = []
    for name in gpus:
        gpu = get_gpu(name)
        for tp in tps:
            try:
                dep = group_deployment(ReplicaGroup.model_validate(engine.group(gpu.name, tp)))
                lm = latency_model(dep, engine.prompt_tokens, engine.output_tokens, engine.max_num_seqs,
                                   engine.max_num_batched_tokens)
            except (CatalogError, ValueError) as exc:
                left_out.append(f"{gpu.name} TP{tp}: {exc}")
                continue
            out.append(Candidate(gpu.name, tp, gpu.price_per_hour, lm, predicted_knee(lm, engine.knee_factor)))
    return out, left_out


def default_gateway_data(model: str) -> dict[str, Any]:
    """The gateway's default tiers, one tenant allowed Turbo, one pool whose engines order their
    queue by the tier's priority (vLLM ``--scheduling-policy priority``, as examples/gateway.yaml)."""
    return {
        "tenants": [{"name": "plan", "key_sha256": hash_key(API_KEY), "tiers": list(TIERS)}],
        "pools": [{"name": POOL, "models": [model], "scheduling_policy": "priority",
                   "replicas": [{"url": "http://simulated:1"}]}],
    }


def default_gateway(model: str) -> GatewayConfig:
    return parse_config(default_gateway_data(model), source="plan size's gateway")


def window_s(inputs: SizeInputs) -> float:
    """Long enough that the smallest tier with an SLO sends :data:`TIER_REQUESTS` requests."""
    rate = min(inputs.peak_rps * inputs.tier_share(t) for t in inputs.active_slos)
    return min(MAX_WINDOW_S, max(MIN_WINDOW_S, TIER_REQUESTS / rate))


@dataclass
class SimMeasure:
    """``measure(candidate, replicas)`` for :func:`turbogate.plan.size.size`: one simulated run each."""

    engine: Engine
    inputs: SizeInputs
    gateway: GatewayConfig | None = None  # default: :func:`default_gateway`
    seed: int = 1
    duration_s: float | None = None  # default: :func:`window_s`
    pool: str = POOL
    _load: LoadOptions | None = field(default=None, init=False)

    def load(self) -> LoadOptions:
        if self._load is None:
            tiers = ",".join(f"{t}={self.inputs.tier_share(t):g}" for t in TIERS if self.inputs.tier_share(t) > 0)
            e = self.engine
            self._load = build_load(
                shape=None, qps=self.inputs.peak_rps, qps_start=None, qps_end=None, steps=1,
                duration=self.duration_s or window_s(self.inputs), arrivals="poisson", burstiness=1.0,
                prompt_tokens=str(e.prompt_tokens), output_tokens=str(e.output_tokens), dataset=None, no_seed=False,
                tiers=tiers, n_api_keys=1, random_seed=self.seed, slo=None, knee_method="throughput", knee_k=2.0,
                knee_metric="e2e", fleet_cost=1.0, tier_cost=None)
        return self._load

    def fleet_data(self, c: Candidate, replicas: int) -> dict[str, Any]:
        """The fleet file of ``replicas`` × ``c`` (docs/sim.md): ``turbogate sim --fleet`` runs the same."""
        return {"pools": [{"name": self.pool, "replicas": [self.engine.group(c.gpu, c.tp, replicas)]}]}

    def fleet(self, c: Candidate, replicas: int) -> Fleet:
        return parse_fleet(self.fleet_data(c, replicas))

    def config(self, c: Candidate, replicas: int) -> SimConfig:
        gw = self.gateway or default_gateway(self.engine.model)
        if not any(p.name == self.pool for p in gw.pools):
            raise ConfigError(f"the gateway config has no pool {self.pool!r}")
        return SimConfig(gateway=gw, fleet=self.fleet(c, replicas), load=self.load(), model=self.engine.model,
                         api_keys=(API_KEY,) if self.gateway is None else (), warmup_s=WARMUP_S,
                         label=f"plan size: {replicas} × {c.gpu} TP{c.tp}")

    def __call__(self, c: Candidate, replicas: int) -> Measured:
        wall = time.perf_counter()
        outcome = simulate(self.config(c, replicas))
        return judge(outcome.records, self.load().duration_s, time.perf_counter() - wall)


def judge(records: Sequence[RequestRecord], window: float, wall_s: float = 0.0) -> Measured:
    """Each tier's p95 TTFT and TPOT over the window, and its second half's p95 TTFT.

    A request that was shed or failed counts as slower than every answer (it never met its SLO),
    so a fleet cannot meet a p95 by shedding more than 5 % of a tier."""
    ttft: dict[str, float | None] = {}
    late: dict[str, float | None] = {}
    tpot: dict[str, float | None] = {}
    failed: dict[str, float] = {}
    counts: dict[str, int] = {}
    for tier in TIERS:
        mine = [r for r in records if r.tier_asked == tier]
        if not mine:
            continue
        ttft[tier] = _p95_ttft(mine)
        late[tier] = _p95_ttft([r for r in mine if r.scheduled_s >= window / 2])
        tpot[tier] = Dist.of([r.tpot_s for r in mine if r.ok and r.tpot_s is not None]).p95
        counts[tier] = len(mine)
        failed[tier] = sum(1 for r in mine if not r.ok) / len(mine)
    return Measured(ttft, tpot, failed, counts, late, wall_s)


def _p95_ttft(records: Sequence[RequestRecord]) -> float | None:
    served = [r.ttft_s for r in records if r.ok and r.ttft_s is not None]
    return Dist.of(served, censored=len(records) - len(served)).p95
