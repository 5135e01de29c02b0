"""``plan profile --tiny`` writes a GPU profile that ``plan capacity --gpu-profile`` reads; engine profiles
and the finite burst from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turbogate.cli import app
from turbogate.perf import get_gpu
from turbogate.plan.profile import profile_from_dict

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("profile") / "gpu.json"
    result = runner.invoke(app, ["plan", "profile", "--tiny", "--reps", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_tiny_profile_measures_every_figure_the_model_needs(tiny_profile: Path) -> None:
    data = json.loads(tiny_profile.read_text())
    assert data["backend"] == "numpy-cpu" and data["tiny"] is True and data["gpu"] == "H100-SXM"
    for key in ("big_read_bytes_per_s", "gemm_1_rows_bytes_per_s", "gemm_16_rows_bytes_per_s", "big_gemm_flops",
                "prefill_flops"):
        assert data["measured"][key] > 0, key
    assert 0 < data["bw_efficiency"] <= 1 and 0 < data["mfu"] <= 1
    kinds = {row["kind"] for row in data["steps"]}
    assert kinds == {"decode", "prefill"}
    for row in data["steps"]:
        assert row["measured_s"] > 0 and row["predicted_s"] > 0
    prof = profile_from_dict(data)
    gpu = prof.gpu()
    assert gpu.bw_efficiency == data["bw_efficiency"] and gpu.mfu == data["mfu"]
    assert gpu.hbm_bytes == get_gpu("H100-SXM").hbm_bytes  # memory and peaks stay the catalog's


def test_capacity_reads_the_profile_and_its_efficiencies_change_the_answer(tiny_profile: Path) -> None:
    args = ["plan", "capacity", "--gpu", "H100-SXM", "--json"]
    plain = json.loads(runner.invoke(app, args).output)
    result = runner.invoke(app, [*args, "--gpu-profile", str(tiny_profile)])
    assert result.exit_code == 0, result.output
    profiled = json.loads(result.output)
    data = json.loads(tiny_profile.read_text())
    # decode streams the weights at the measured share of bandwidth: the lone-sequence step scales with it
    ratio = profiled["decode"][0]["step_time_s"] / plain["decode"][0]["step_time_s"]
    expected = 0.8 / data["bw_efficiency"]  # H100-SXM's catalog efficiency is the 0.8 default
    assert ratio == pytest.approx(expected, rel=0.35)


def test_a_bad_profile_names_its_field(tmp_path: Path, tiny_profile: Path) -> None:
    data = json.loads(tiny_profile.read_text())
    data["mfu"] = 1.7
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    result = runner.invoke(app, ["plan", "capacity", "--gpu-profile", str(bad)])
    assert result.exit_code == 2
    assert "mfu" in result.output
    missing = runner.invoke(app, ["plan", "capacity", "--gpu-profile", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "--gpu-profile" in missing.output


def test_engine_profiles_differ_and_base_is_the_old_model() -> None:
    def sat(profile: str) -> float:
        out = runner.invoke(app, ["plan", "capacity", "--json", "--engine-profile", profile])
        assert out.exit_code == 0, out.output
        return float(json.loads(out.output)["saturation"]["request_rate"])

    rates = {p: sat(p) for p in ("base", "vllm-v1", "sglang", "trtllm")}
    assert len({round(r, 6) for r in rates.values()}) == 4
    bad = runner.invoke(app, ["plan", "capacity", "--engine-profile", "vllm-v9"])
    assert bad.exit_code == 2 and "vllm-v1" in bad.output


def test_burst_answers_n_requests_at_once_with_the_stepped_engine() -> None:
    result = runner.invoke(app, ["plan", "burst", "--requests", "32", "--prompt-tokens", "256", "--output-tokens",
                                 "64", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["requests"] == 32 and out["engine_profile"] == "vllm-v1"
    # a burst starts in lock-step and drains: below the steady state, never above it
    assert 0 < out["output_tokens_per_s"] < out["steady_state_output_tokens_per_s"]
    assert out["ttft_p99_s"] >= out["ttft_p50_s"] > 0
