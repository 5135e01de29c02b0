"""``plan size`` prices its candidates with the engine profile ``plan capacity`` uses, and hands the
simulator a fleet file under the same profile (one set of performance terms for prune and confirm)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from turbogate.perf import deployment, get_gpu, get_model
from turbogate.perf.profiles import DEFAULT_PROFILE
from turbogate.plan.latency import latency_model
from turbogate.plan.profile_opts import profiled
from turbogate.plan.size import SizeInputs, TierSLO
from turbogate.plan.size_sim import Engine, SimMeasure, candidates

MODEL, PROMPT, OUTPUT = "llama-3.1-8b", 512, 256


def _capacity_saturation(gpu: str, engine_profile: str, gpu_profile: Path | None = None) -> float:
    dep = profiled(deployment(get_gpu(gpu), get_model(MODEL)), engine_profile, gpu_profile)
    return latency_model(dep, PROMPT, OUTPUT, 256, 8192).saturation_rate


@pytest.mark.parametrize("engine_profile", [DEFAULT_PROFILE, "trtllm", "base"])
def test_size_candidates_price_the_profile_that_plan_capacity_prices(engine_profile: str) -> None:
    engine = Engine(MODEL, PROMPT, OUTPUT, engine_profile=engine_profile)
    (cand,), _ = candidates(engine, ["H100-SXM"], [1])
    assert cand.model.saturation_rate == pytest.approx(_capacity_saturation("H100-SXM", engine_profile))
    inputs = SizeInputs(peak_rps=10.0, turbo_share=0.2, slos={"turbo": TierSLO(0.5), "standard": TierSLO(3.0)})
    (group,) = SimMeasure(engine, inputs).fleet_data(cand, 3)["pools"][0]["replicas"]
    assert (group["engine_profile"], group["count"]) == (engine_profile, 3)


def test_the_default_profile_is_not_the_base_factors() -> None:
    # The terms differ, so the test above tells a candidate priced under the old base factors apart.
    assert _capacity_saturation("H100-SXM", DEFAULT_PROFILE) != pytest.approx(_capacity_saturation("H100-SXM", "base"))


def test_a_gpu_profile_refines_only_its_own_gpu() -> None:
    path = Path(str(resources.files("turbogate.perf").joinpath("data", "h200_issue40_profile.json")))
    from turbogate.plan.profile_cli import load_gpu_profile

    prof = load_gpu_profile(path)
    engine = Engine(MODEL, PROMPT, OUTPUT, measured_gpu=prof.gpu_name, gpu_bw_efficiency=prof.bw_efficiency,
                    gpu_mfu=prof.mfu)
    cands, _ = candidates(engine, ["H200", "H100-SXM"], [1])
    by_gpu = {c.gpu: c.model.saturation_rate for c in cands}
    assert by_gpu["H200"] == pytest.approx(_capacity_saturation("H200", DEFAULT_PROFILE, path))
    assert by_gpu["H200"] != pytest.approx(_capacity_saturation("H200", DEFAULT_PROFILE))
    assert by_gpu["H100-SXM"] == pytest.approx(_capacity_saturation("H100-SXM", DEFAULT_PROFILE))
