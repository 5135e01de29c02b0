"""`plan matrix` without a peak: the loads where the recommendation changes agree with decide() at a peak."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from turbogate.cli import app
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.perf.profiles import DEFAULT_PROFILE, with_profile
from turbogate.plan.knee import predicted_knee
from turbogate.plan.latency import LatencyModel, latency_model
from turbogate.plan.matrix import STANDARD_ONLY, TURBO_CAPPED, TURBO_ON, MatrixInputs, decide, kv_limit, thresholds

# (gpu, model, tp, prompt, output, max_num_seqs): knee-bound, KV-bound (long prompts), an MoE on TP 4.
SHAPES = [("H100-SXM", "llama-3.1-8b", 1, 512, 256, 256), ("H100-SXM", "llama-3.1-8b", 1, 4000, 1000, 256),
          ("A100-40G", "mixtral-8x7b", 4, 1000, 300, 128), ("L4", "llama-3.2-1b", 1, 333, 101, 64)]


def _model(shape: tuple[str, str, int, int, int, int]) -> LatencyModel:
    gpu, model, tp, p, o, seqs = shape
    dep = with_profile(deployment(get_gpu(gpu), get_model(model), tp=tp), DEFAULT_PROFILE)  # as the CLI
    return latency_model(dep, p, o, seqs)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("lora", "http2", "replicas"), [(False, True, 1), (False, True, 3), (True, True, 2),
                                                         (False, False, 1)])
def test_bands_agree_with_decide_at_every_load(shape: tuple[str, str, int, int, int, int], lora: bool, http2: bool,
                                               replicas: int) -> None:
    lm = _model(shape)
    th = thresholds(lm, replicas=replicas, lora_hot_loading=lora, http2_reuse=http2)
    assert th.bands[0].from_rps == 0.0 and th.bands[-1].to_rps is None
    for a, b in zip(th.bands, th.bands[1:], strict=False):
        assert a.to_rps == b.from_rps  # contiguous, no gap
    for band in th.bands:
        end = band.from_rps * 2 + 1 if band.to_rps is None else band.to_rps
        for x in (band.from_rps + (end - band.from_rps) * f for f in (0.001, 0.5, 0.999)):
            d = decide(lm, MatrixInputs(peak_rps=x * replicas, replicas=replicas, lora_hot_loading=lora,
                                        http2_reuse=http2))
            assert d.mode == band.mode, (band, x, d.rules)
    assert [b.mode for b in th.bands][-1] == STANDARD_ONLY
    assert (th.bands[0].mode == TURBO_ON) == (not lora and http2)


def test_kv_limit_inverts_the_kv_utilization() -> None:
    lm = _model(SHAPES[1])
    x = kv_limit(lm, 0.65)
    assert x is not None and 0 < x < lm.saturation_rate
    assert lm.kv_utilization(x) == pytest.approx(0.65, rel=1e-9)
    th = thresholds(lm)
    assert th.kv_limit_rps == x and th.bands[0].to_rps == min(x, th.knee_rps)
    assert kv_limit(_model(SHAPES[0]), 0.65) is None  # 256 short sequences never fill 65 % of an H100's cache


def test_cli_without_peak_prints_the_thresholds() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["plan", "matrix", "--gpu", "H100-SXM", "--replicas", "2", "--prompt-tokens", "512",
                                 "--output-tokens", "256", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    lm = _model(SHAPES[0])
    assert [b["mode"] for b in out["bands"]] == [TURBO_ON, TURBO_CAPPED, STANDARD_ONLY]
    assert out["bands"][0]["to_rps_per_replica"] == pytest.approx(predicted_knee(lm))
    assert out["bands"][0]["to_fleet_rps"] == pytest.approx(2 * predicted_knee(lm))
    assert out["bands"][2]["from_fleet_rps"] == pytest.approx(2 * lm.saturation_rate)
    text = runner.invoke(app, ["plan", "matrix", "--gpu", "H100-SXM", "--replicas", "2", "--prompt-tokens", "512",
                                 "--output-tokens", "256"])
    assert text.exit_code == 0, text.output
    assert "Up to what load is Turbo on, capped, off?" in text.output
    assert f"up to {2 * predicted_knee(lm):.2f}" in text.output and f"from {2 * lm.saturation_rate:.2f}" in text.output
    refused = runner.invoke(app, ["plan", "matrix", "--xlsx", "m.xlsx"])
    assert refused.exit_code == 2 and "--xlsx needs --peak-rps" in refused.output
