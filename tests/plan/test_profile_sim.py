"""``sim --engine-profile / --gpu-profile``: every replica group takes them; a fleet file names its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turbogate.errors import ConfigError
from turbogate.perf.profiles import DEFAULT_PROFILE, get_profile
from turbogate.sim.cli import profiled_fleet
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.replica import group_deployment

FLEET = {"pools": [{"name": "p", "replicas": [{"count": 1, "gpu": "H200", "model": "llama-3.1-8b"},
                                               {"count": 1, "gpu": "L4", "model": "llama-3.2-1b",
                                                "engine_profile": "sglang"}]}]}


def _profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "h200.json"
    path.write_text(json.dumps({"format": 1, "gpu": "H200", "device": "test", "backend": "torch-cuda",
                                "bw_efficiency": 0.84, "mfu": 0.62, "measured": {}}))
    return path


def test_a_fleet_group_runs_its_own_profile_and_the_default_otherwise() -> None:
    fleet = parse_fleet(FLEET)
    h200, l4 = fleet.pools[0].replicas
    assert h200.engine_profile == DEFAULT_PROFILE
    assert group_deployment(h200).factors == get_profile(DEFAULT_PROFILE).factors
    assert group_deployment(l4).factors == get_profile("sglang").factors


def test_the_flags_override_every_group_and_measure_only_the_profiled_gpu(tmp_path: Path) -> None:
    fleet = profiled_fleet(parse_fleet(FLEET), "trtllm", _profile_file(tmp_path))
    h200, l4 = fleet.pools[0].replicas
    assert h200.engine_profile == l4.engine_profile == "trtllm"
    dep = group_deployment(h200)
    assert dep.gpu.mfu == 0.62 and dep.gpu.bw_efficiency == 0.84
    assert group_deployment(l4).gpu.mfu is None  # another GPU: the catalog's


def test_an_unknown_engine_profile_in_a_fleet_file_names_the_known_ones() -> None:
    bad = {"pools": [{"name": "p", "replicas": [{"gpu": "L4", "model": "llama-3.2-1b", "engine_profile": "x"}]}]}
    with pytest.raises(ConfigError, match="vllm-v1"):
        parse_fleet(bad)
