"""Small configs for simulator tests: one pool of L4 replicas serving Llama-3.1-8B, 8 seqs each."""

from __future__ import annotations

from typing import Any

from turbogate.bench.options import LoadOptions, build_load
from turbogate.config import GatewayConfig, hash_key, parse_config
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import Fleet, parse_fleet

KEY = "sk-sim-test"
MODEL = "llama-3.1-8b"


def gateway_data(**extra: Any) -> dict[str, Any]:
    return {
        "tenants": [{"name": "acme", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "p", "models": [MODEL], "replicas": [{"url": "http://unused:1", "max_concurrency": 8}]}],
        "scrape": {"interval_s": 0.5},
        **extra,
    }


def gateway(**extra: Any) -> GatewayConfig:
    return parse_config(gateway_data(**extra))


def fleet(replicas: int = 2, **extra: Any) -> Fleet:
    return parse_fleet({"pools": [{"name": "p", "replicas": [{"count": replicas, "gpu": "L4", "model": MODEL,
                                                                "max_num_seqs": 8}]}], **extra})


def load(**kw: Any) -> LoadOptions:
    args: dict[str, Any] = dict(
        shape=None, qps=2.0, qps_start=None, qps_end=None, steps=1, duration=20.0, arrivals="poisson",
        burstiness=1.0, prompt_tokens="128", output_tokens="48", dataset=None, no_seed=False,
        tiers="turbo=0.2,standard=0.8", n_api_keys=1, random_seed=3, slo=None, knee_method="throughput",
        knee_k=2.0, knee_metric="e2e", fleet_cost=1.0, tier_cost=None)
    if "qps_start" in kw:
        args["qps"] = None  # a ramp
    args.update(kw)
    return build_load(**args)


def sim_config(*, replicas: int = 2, fleet_extra: dict[str, Any] | None = None, policy: str = "turbogate",
               **load_kw: Any) -> SimConfig:
    return SimConfig(gateway=gateway(), fleet=fleet(replicas, **(fleet_extra or {})), load=load(**load_kw),
                     policy=policy, api_keys=(KEY,))
