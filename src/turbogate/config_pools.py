"""The config's pools and how L2 reads them: replicas, knees and the knee guard, scraping, health,
load bands and the learned concurrency limit (defaults read from the core, never written twice)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from turbogate.config_base import ConfigModel, RegionName
from turbogate.sched.guard import GuardPolicy
from turbogate.sched.picker import PickerConfig

EngineKind = Literal["vllm", "sglang", "tgi", "llamacpp", "openai", "emulator"]
# Kinds whose server has no load metrics by default (docs/engines.md): L2 counts its own in-flight requests.
UNSCRAPED_KINDS: frozenset[str] = frozenset({"openai", "llamacpp"})
_PICK = PickerConfig()
_GUARD = GuardPolicy()


class Replica(ConfigModel):
    url: str = Field(pattern=r"^https?://", description="base URL of the engine (without /v1)")
    engine: EngineKind = "vllm"
    max_concurrency: int | None = Field(
        None, ge=1, description="optional cap on the requests in flight to this replica; the working limit is "
        "learned from the engine's running/waiting metrics (adaptive concurrency)")
    max_num_seqs: int | None = Field(
        None, ge=1, description="the engine's own batch limit (vLLM --max-num-seqs): the learned limit starts there "
        "instead of slow-starting, and never exceeds it, so a surge finds it already learnt (docs/gateway.md)")
    metrics_path: str | None = Field(
        None, description="Prometheus endpoint of the engine's load metrics; default /metrics, except for "
        "engine 'openai' and 'llamacpp' (llama_cpp.server has none; llama-server's needs --metrics): those are "
        "not scraped and L2 uses the gateway's own in-flight counts. Set it to scrape a llama-server --metrics")
    health_path: str | None = Field(
        None, description="health endpoint probed while ejected (and for unscraped replicas); default /health, "
        "/v1/models for engine 'llamacpp' (llama_cpp.server has no /health)")
    name: str | None = None
    api_key_env: str | None = Field(
        None, description="name of an environment variable holding the engine's API key (sent as a bearer token)"
    )

    @field_validator("url")
    @classmethod
    def _strip(cls, v: str) -> str:
        v = v.rstrip("/")
        return v[:-3] if v.endswith("/v1") else v

    @model_validator(mode="before")
    @classmethod
    def _engine_paths(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        engine = data.get("engine", "vllm")
        data = dict(data)
        if data.get("metrics_path") is None and engine not in UNSCRAPED_KINDS:
            data["metrics_path"] = "/metrics"
        if data.get("health_path") is None:
            data["health_path"] = "/v1/models" if engine == "llamacpp" else "/health"
        return data

    @property
    def scraped(self) -> bool:
        """Whether L2 reads this replica's load from its metrics (else from own in-flight counts)."""
        return self.metrics_path is not None and self.engine != "openai"


class PlanKnee(ConfigModel):
    """The pool's hardware, model and request shape, for the planner's knee (``knee_from: plan``)."""

    gpu: str = Field(min_length=1, description="GPU name, as `turbogate plan gpus` lists them")
    model: str | None = Field(None, description="catalog model or config.json path (default: the pool's first model)")
    tp: int = Field(1, ge=1)
    dtype: str = "bf16"
    prompt_tokens: int = Field(512, ge=1)
    output_tokens: int = Field(256, ge=1)
    max_num_seqs: int = Field(256, ge=1)
    knee_factor: float = Field(2.0, gt=1, description="the knee: mean E2E reaches this × its unloaded value")


class Pool(ConfigModel):
    name: str = Field(min_length=1)
    models: list[str] = Field(min_length=1, description="model names this pool serves")
    replicas: list[Replica] = Field(min_length=1)
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "fcfs", description="'priority' when the engines run vLLM --scheduling-policy priority: the tier is "
        "then passed as the request's priority field"
    )
    region: RegionName | None = Field(None, description="where the pool runs, for L3 region arbitration")
    turbo: bool = Field(True, description="Turbo-capable; false makes a Standard pool that serves Turbo requests "
                        "(as Standard, saying so) only while every Turbo-capable pool of the model is unhealthy")
    alt_svc: str | None = Field(None, pattern=r"^[\x20-\x7e]+$", description="Alt-Svc header value sent with "
                                "answers this pool served, e.g. 'h2=\"eu.api.example.com:443\"; ma=3600'")
    knee_rps: float | None = Field(
        None, gt=0, description="the pool's knee (offered req/s, all tiers): with one, a knee guard caps and then "
        "closes Turbo past it (docs/gateway.md)")
    knee_from: str | None = Field(
        None, description="where the knee comes from: a bench or sim run folder (its measured knee, tier 'all'), "
        "'plan' (the planner's knee for the pool's `plan` block) or 'online' (learnt from live signals)")
    plan: PlanKnee | None = Field(None, description="hardware, model and request shape for knee_from: plan")

    @model_validator(mode="after")
    def _one_knee(self) -> Pool:
        if self.knee_rps is not None and self.knee_from is not None:
            raise ValueError("give knee_rps or knee_from, not both")
        if self.knee_from == "plan" and self.plan is None:
            raise ValueError("knee_from: plan needs a plan block (gpu, prompt_tokens, output_tokens, ...)")
        return self


class KneeGuardConfig(ConfigModel):
    """Thresholds of the knee guard, as offered load ÷ knee (sched/guard.py)."""

    enter_capped: float = Field(_GUARD.enter_capped, gt=0)
    leave_capped: float = Field(_GUARD.leave_capped, gt=0)
    enter_closed: float = Field(_GUARD.enter_closed, gt=0)
    leave_closed: float = Field(_GUARD.leave_closed, gt=0)
    min_dwell_s: float = Field(_GUARD.min_dwell_s, ge=0)
    turbo_share: float = Field(_GUARD.turbo_share, gt=0, le=1,
                               description="capped: Turbo grants per second at most this share of the knee")
    window_s: float = Field(_GUARD.rate_tau_s, gt=0, description="time constant of the offered-load estimate")
    online: bool = Field(False, description="pools with neither knee_rps nor knee_from get a knee learnt online "
                         "from live signals (sched/knee_online.py)")

    @model_validator(mode="after")
    def _ordered(self) -> KneeGuardConfig:
        if not self.leave_capped < self.enter_capped <= self.leave_closed < self.enter_closed:
            raise ValueError("need leave_capped < enter_capped <= leave_closed < enter_closed")
        return self


class Scrape(ConfigModel):
    interval_s: float = Field(1.0, ge=0.1, le=60)
    timeout_s: float = Field(1.0, gt=0)
    stale_after_s: float = Field(_PICK.stale_after_s, gt=0)


class HealthConfig(ConfigModel):
    interval_s: float = Field(1.0, gt=0)
    eject_after_failures: int = Field(_PICK.eject_after_failures, ge=1)
    probe_backoff_s: float = Field(_PICK.probe_backoff_s, gt=0)
    probe_backoff_max_s: float = Field(_PICK.probe_backoff_max_s, gt=0)


class Bands(ConfigModel):
    light_kv: float = Field(_PICK.light_kv, gt=0, le=1)
    saturated_kv: float = Field(_PICK.saturated_kv, gt=0, le=1)
    light_queue_ms: float = Field(_PICK.light_queue_s * 1000, ge=0)
    saturated_queue_ms: float = Field(_PICK.saturated_queue_s * 1000, ge=0)
    scale_out_after_s: float = Field(_PICK.scale_out_after_s, ge=0)
    phase_weight: float = Field(_PICK.phase_weight, ge=0, le=10, description=(
        "phase-aware choice: weight of a replica's DCGM tensor/DRAM pressure for the request's prefill share in its "
        "score (sched/phase.py); 0 turns it off (docs/gateway.md says when to turn it on)"))


class Concurrency(ConfigModel):
    """How each replica's concurrency limit is learned (sched/picker.py)."""

    initial: int = Field(_PICK.initial_limit, ge=1,
                         description="limit before the first scrape; it then grows while the engine keeps up")
    queue_tolerance: float = Field(_PICK.queue_tolerance, ge=0,
                                   description="engine waiting count tolerated before the limit shrinks")
    grow_every_scrapes: int = Field(_PICK.grow_every_scrapes, ge=1,
                                    description="once the limit has been cut, probe one more slot only this often")
    unscraped_limit: int = Field(_PICK.unscraped_limit, ge=1,
                                 description="limit of a replica without load metrics (engine: openai), unless its "
                                 "max_concurrency says otherwise")
