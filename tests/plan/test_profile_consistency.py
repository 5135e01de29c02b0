"""Every plan subcommand answers one deployment with one engine profile: capacity, matrix and roi agree,
and the workbook's formulas carry every term of the profile (checked cell by cell against the model)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from turbogate.cli import app
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.perf.profiles import DEFAULT_PROFILE, ENGINE_PROFILES, with_profile
from turbogate.plan.formula import Book
from turbogate.plan.latency import latency_model
from turbogate.plan.matrix import MatrixInputs, decide
from turbogate.plan.xlsx import Scenario, build_sheets

# (gpu, model, tp, dtype): a dense model on one GPU, a dense one over TP 4 (all-reduce growth), an MoE over TP 2.
FLEETS = (("H100-SXM", "llama-3.1-8b", 1, "bf16"), ("H200", "llama-3.3-70b", 4, "fp8"),
          ("A100-80G-SXM", "mixtral-8x7b", 2, "bf16"))


def _json(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    out: dict[str, object] = json.loads(result.output)
    return out


@pytest.mark.parametrize("profile", [None, "trtllm", "sglang", "vllm-v0"])
@pytest.mark.parametrize("fleet", FLEETS[:2])
def test_capacity_matrix_and_roi_agree_on_knee_and_saturation(profile: str | None,
                                                               fleet: tuple[str, str, int, str]) -> None:
    gpu, model, tp, dtype = fleet
    common = ["--gpu", gpu, "--model", model, "--tp", str(tp), "--dtype", dtype, "--prompt-tokens", "1500",
              "--output-tokens", "300", "--max-num-seqs", "128"]
    if profile is not None:
        common += ["--engine-profile", profile]
    cap = _json("capacity", *common)
    mat = _json("matrix", *common, "--peak-rps", "5")
    roi = _json("roi", *common)
    sat, knee = cap["saturation"], cap["knee"]
    assert isinstance(sat, dict) and isinstance(knee, dict)
    assert mat["saturation_rps"] == pytest.approx(sat["request_rate"], rel=1e-12)
    assert roi["saturation_rps"] == pytest.approx(sat["request_rate"], rel=1e-12)
    assert mat["knee_rps"] == pytest.approx(knee["rate"], rel=1e-12)
    assert roi["knee_rps"] == pytest.approx(knee["rate"], rel=1e-12)


def test_the_default_profile_is_not_the_base_model() -> None:
    """Otherwise the agreement above would not show that matrix and roi left the base factors."""
    common = ["--gpu", "H100-SXM", "--model", "llama-3.1-8b", "--peak-rps", "5"]
    assert _json("matrix", *common)["knee_rps"] != _json("matrix", *common, "--engine-profile", "base")["knee_rps"]


def _column(book: Book, sheet: dict[tuple[int, int], object], header: str, row: int) -> object:
    col = next(c for (r, c), v in sheet.items() if r == 1 and v == header)
    return book.value("matrix", row, col)


# Factors no shipped profile sets, so that each formula term is exercised with a non-default value.
EXTRA = {"decode_allreduce_s": 0.000009, "moe_routing_scale": 0.6, "frontend_per_token_s": 0.00002,
         "ttft_steps": 2.0, "kv_bw_efficiency": 0.5}


@pytest.mark.parametrize("profile", [*ENGINE_PROFILES, "extra"])
def test_workbook_formulas_follow_each_profile(profile: str) -> None:
    scenarios, models = [], []
    for i, (gpu, model, tp, dtype) in enumerate(FLEETS):
        dep = with_profile(deployment(get_gpu(gpu), get_model(model), tp=tp, weight_dtype=dtype),
                           DEFAULT_PROFILE if profile == "extra" else profile)
        if profile == "extra":
            dep = replace(dep, factors=replace(dep.factors, **EXTRA))
        inputs = MatrixInputs(peak_rps=4.0 + i, replicas=1)
        scenarios.append(Scenario(f"s{i}", dep, 1200, 250, 96, 4096, inputs, profile))
        models.append((latency_model(dep, 1200, 250, 96, 4096), inputs))
    sheets = build_sheets(scenarios)
    book, matrix = Book(sheets.cells), sheets.cells["matrix"]
    for r, c in sorted(sheets.cells["knee"]):  # the bisection chain left to right, as write_workbook does
        book.value("knee", r, c)
    for row, (lm, inputs) in enumerate(models, start=2):
        d = decide(lm, inputs)

        def at(header: str, row: int = row) -> object:
            return _column(book, matrix, header, row)

        assert at("saturation rate (req/s)") == pytest.approx(lm.saturation_rate, rel=1e-9)
        assert at("lone decode step (s)") == pytest.approx(lm.s_idle, rel=1e-9)
        assert at("unloaded TTFT (s)") == pytest.approx(lm.ttft0, rel=1e-9)
        assert at("TTFT beside a full batch (s)") == pytest.approx(lm.ttft_full, rel=1e-9)
        assert at("unloaded E2E (s)") == pytest.approx(lm.e2e(0.0), rel=1e-9)
        assert at("knee (req/s per replica)") == pytest.approx(d.knee_rps, rel=1e-6)
        assert at("recommendation") == d.label
