"""The fleet file: examples load, bad fields are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim.helpers import load
from turbogate.config import load_config
from turbogate.errors import ConfigError
from turbogate.sim.build import SimConfig, build_replicas
from turbogate.sim.fleet import load_fleet, parse_fleet

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "replicas"), [("fleet.yaml", 12), ("fleet-100gpu.yaml", 100),
                                                ("fleet-4xh100.yaml", 4), ("fleet-2xl4.yaml", 2)])
def test_examples_load_and_match_the_example_gateway(name: str, replicas: int) -> None:
    fleet = load_fleet(ROOT / "examples" / name)
    assert fleet.num_replicas == replicas
    sc = SimConfig(gateway=load_config(ROOT / "examples" / "gateway.yaml"), fleet=fleet, load=load())
    reps, _ = build_replicas(sc)
    assert len(reps) == replicas


def _pool(**group: object) -> dict[str, object]:
    return {"pools": [{"name": "p", "replicas": [{"gpu": "H100-SXM", "model": "llama-3.1-8b", **group}]}]}


@pytest.mark.parametrize(("data", "field"), [
    (_pool(tp=0), "pools.0.replicas.0.tp"),
    (_pool(colour="red"), "pools.0.replicas.0.colour"),
    ({"pools": []}, "pools"),
    ({**_pool(), "failures": [{"replica": "p/5", "down_at_s": 1}]}, "failures.0.replica"),
    ({**_pool(), "failures": [{"replica": "p/0", "down_at_s": 5, "up_at_s": 2}]}, "up_at_s"),
    ({**_pool(), "network": {"client_gateway_ms": -1}}, "network.client_gateway_ms"),
])
def test_bad_fields_are_named(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_fleet(data, "fleet.yaml")


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="top level"):
        parse_fleet(["x"])
