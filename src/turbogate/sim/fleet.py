"""The fleet file of ``turbogate sim``: what hardware stands behind each pool of the gateway config.

Pydantic at the edge only: :func:`load_fleet` validates YAML into frozen models and a
``ConfigError`` names each bad field (``pools.0.replicas.0.tp: must be >= 1``);
``python -m turbogate.sim.fleet`` prints the JSON schema.  docs/sim.md shows an example.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from turbogate.perf.profiles import DEFAULT_PROFILE, ENGINE_PROFILES
from turbogate.validation import read_yaml, validate_document


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReplicaGroup(_Model):
    """``count`` identical engine replicas (as the emulator's options describe one)."""

    count: int = Field(1, ge=1, description="how many replicas of this kind")
    gpu: str = Field(description="GPU name from the catalog (turbogate plan gpus), e.g. H100-SXM")
    model: str = Field(description="model name from the catalog or an HF config.json path")
    tp: int = Field(1, ge=1, description="tensor-parallel chips per replica")
    max_num_seqs: int = Field(256, ge=1)
    max_num_batched_tokens: int = Field(8192, ge=1)
    num_gpu_blocks: int | None = Field(None, ge=1, description="KV blocks; default: what memory allows")
    dtype: str = "bf16"
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    scheduling_policy: Literal["fcfs", "priority"] | None = Field(
        None, description="default: the pool's scheduling_policy in the gateway config")
    max_concurrency: int | None = Field(
        None, ge=1, description="gateway-side cap per replica; default: the gateway config's first replica's")
    engine_profile: str = Field(DEFAULT_PROFILE, description="engine whose factors the perf model uses: "
                                f"{', '.join(ENGINE_PROFILES)} (docs/plan.md)")
    gpu_bw_efficiency: float | None = Field(None, gt=0, le=1, description="measured share of HBM bandwidth "
                                            "(a GPU profile's; sim --gpu-profile sets it)")
    gpu_mfu: float | None = Field(None, gt=0, le=1, description="measured prefill MFU (a GPU profile's)")

    @model_validator(mode="after")
    def _known_engine_profile(self) -> ReplicaGroup:
        if self.engine_profile not in ENGINE_PROFILES:
            raise ValueError(f"engine_profile must be one of {', '.join(ENGINE_PROFILES)}, got {self.engine_profile!r}")
        return self


class PoolFleet(_Model):
    name: str = Field(min_length=1, description="a pool of the gateway config, by name")
    replicas: list[ReplicaGroup] = Field(min_length=1)
    region: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,32}$",
                               description="the pool's region for L3 (default: the gateway config's)")
    rtt_ms: float = Field(0.0, ge=0, description="extra gateway↔pool round trip, added to every call")


class ScrapeSim(_Model):
    interval_s: float | None = Field(None, gt=0, description="default: the gateway config's scrape.interval_s")
    staleness_s: float = Field(0.0, ge=0, description="a scrape reports the engine as it was this long before")


class Network(_Model):
    client_gateway_ms: float = Field(0.0, ge=0, description="one way, client → gateway (and back)")
    gateway_replica_ms: float = Field(0.0, ge=0, description="one way, gateway → replica (and back)")


class Outage(_Model):
    replica: str = Field(pattern=r"^.+/\d+$", description="POOL/INDEX, counting from 0 across the pool's groups")
    down_at_s: float = Field(ge=0)
    up_at_s: float | None = Field(None, description="recovery time; never if unset")
    kind: Literal["crash", "freeze"] = Field("crash", description="crash: it refuses connections and its requests "
                                             "break; freeze: it takes connections and answers nothing, /metrics and "
                                             "/health included (a SIGSTOPped engine), so only its silence tells")

    @model_validator(mode="after")
    def _order(self) -> Outage:
        if self.kind == "freeze" and self.up_at_s is not None:
            raise ValueError("a freeze has no up_at_s: the replica stays frozen")
        if self.up_at_s is not None and self.up_at_s <= self.down_at_s:
            raise ValueError("up_at_s must be after down_at_s")
        return self


class Fleet(_Model):
    pools: list[PoolFleet] = Field(min_length=1)
    scrape: ScrapeSim = ScrapeSim.model_validate({})  # frozen, so one shared default is safe
    network: Network = Network.model_validate({})  # frozen, so one shared default is safe
    failures: list[Outage] = Field(default_factory=list)
    clients: dict[str, float] = Field(
        default_factory=dict, description="client region → share of the requests (L3; none: no client regions)")
    region_rtt_ms: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="client region → pool region → round trip in ms: what a client pays to "
        "reach the pool's region, and the table L3 ranks pools with")

    @model_validator(mode="after")
    def _known_replicas(self) -> Fleet:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError("pools: names must be unique")
        sizes = {p.name: sum(g.count for g in p.replicas) for p in self.pools}
        for region, share in self.clients.items():
            if not share > 0:
                raise ValueError(f"clients.{region}: the share must be > 0")
        for client, table in self.region_rtt_ms.items():
            for region, ms in table.items():
                if ms < 0:
                    raise ValueError(f"region_rtt_ms.{client}.{region}: must be >= 0")
        for i, f in enumerate(self.failures):
            pool, _, idx = f.replica.rpartition("/")
            if pool not in sizes or int(idx) >= sizes[pool]:
                raise ValueError(f"failures.{i}.replica: no replica {f.replica!r} in this fleet")
        return self

    @property
    def num_replicas(self) -> int:
        return sum(g.count for p in self.pools for g in p.replicas)


def parse_fleet(data: Any, source: str = "fleet") -> Fleet:
    return validate_document(Fleet, data, source)


def load_fleet(path: str | Path) -> Fleet:
    p = Path(path)
    return parse_fleet(read_yaml(p), str(p))


if __name__ == "__main__":
    sys.stdout.write(json.dumps(Fleet.model_json_schema(), indent=2) + "\n")
