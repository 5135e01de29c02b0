"""``turbogate plan`` end to end: tables, --json, errors, custom config.json, --from-run calibration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turbogate.cli import app
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.perf.profiles import DEFAULT_PROFILE, with_profile
from turbogate.plan.latency import latency_model
from turbogate.results import RequestRecord, Step, load_run, summarize, write_run

runner = CliRunner()


def _ok(*args: str) -> str:
    result = runner.invoke(app, ["plan", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _fails(*args: str) -> str:
    result = runner.invoke(app, ["plan", *args])
    assert result.exit_code == 2, result.output
    return result.output


def test_capacity_json_matches_the_model() -> None:
    out = json.loads(_ok("capacity", "--gpu", "a100", "--model", "llama-3.1-8b", "--prompt-tokens", "512",
                              "--output-tokens", "256", "--rates", "1,17", "--json"))
    assert out["gpu"] == "A100-80G-SXM"
    assert out["kv_bytes_per_token"] == 131_072
    # plan's default engine profile (vllm-v1) is the model the command runs
    dep = with_profile(deployment(get_gpu("A100-80G-SXM"), get_model("llama-3.1-8b")), DEFAULT_PROFILE)
    lm = latency_model(dep, 512, 256)
    assert out["saturation"]["request_rate"] == pytest.approx(lm.saturation_rate)
    assert [r["rate"] for r in out["rates"]] == [1.0, 17.0]
    assert out["rates"][0]["ttft_s"] == pytest.approx(lm.ttft(1.0))
    assert out["rates"][1]["saturated"] is True and out["rates"][1]["ttft_s"] is None
    assert out["rates"][1]["naive_bw_util"] == pytest.approx(17 * 131_072 * 768 / 2.039e12)


def test_capacity_tables_and_fp8_kv() -> None:
    text = _ok("capacity", "--gpu", "H100-SXM", "--kv-dtype", "fp8", "--output-tokens", "128")
    assert "65,536" in text  # fp8 KV bytes per token
    assert "saturation request rate" in text and "Decode step time" in text
    # the two bandwidth columns say what they are
    assert "naive bw_util: the formula in circulation" in text and "HBM traffic: the bytes" in text


def test_custom_model_from_config(tmp_path: Path) -> None:
    cfg = {"hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 36,
           "vocab_size": 151936, "intermediate_size": 9728, "head_dim": 128, "tie_word_embeddings": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    out = json.loads(_ok("capacity", "--model", str(path), "--json"))
    assert out["kv_bytes_per_token"] == 36 * 8 * 128 * 2 * 2
    models = json.loads(_ok("models", "--model", str(path), "--json"))
    assert models[-1]["head_dim"] == 128


def test_errors_are_one_clear_line() -> None:
    out = _fails("capacity", "--gpu", "B100")
    assert "unknown GPU 'B100'" in out and "H100-SXM" in out
    assert "needs 131.4 GiB" in _fails("matrix", "--gpu", "L4", "--model", "llama-3.1-70b", "--peak-rps", "1")
    assert "unknown model" in _fails("roi", "--model", "gpt-5")
    assert "--rates" in _fails("capacity", "--rates", "1,x")
    assert "not a run folder" in _fails("capacity", "--from-run", "/nonexistent/run")
    assert "dtype" in _fails("capacity", "--dtype", "fp7")


def test_catalog_commands() -> None:
    gpus = json.loads(_ok("gpus", "--json"))
    assert {"H100-SXM", "A100-80G-SXM", "MI300X"} <= {g["name"] for g in gpus}
    assert "H100-SXM" in _ok("gpus")
    models = json.loads(_ok("models", "--json"))
    by = {m["name"]: m for m in models}
    assert by["qwen2.5-7b"]["kv_bytes_per_token_bf16"] == 57_344
    assert "mixtral-8x7b" in _ok("models")


def test_matrix_json_and_xlsx(tmp_path: Path) -> None:
    out = json.loads(_ok("matrix", "--gpu", "H100-SXM", "--batch-size", "256", "--max-tokens", "256",
                         "--peak-rps", "5", "--no-http2", "--xlsx", str(tmp_path / "m.xlsx"), "--json"))
    assert out["label"] == "Turbo capped"
    assert [r["verdict"] for r in out["rules"]] == ["turbo_on", "turbo_on", "turbo_on", "turbo_capped"]
    assert Path(out["xlsx"]).is_file()
    text = _ok("matrix", "--gpu", "H100-SXM", "--peak-rps", "5")
    assert "Recommendation: Turbo on" in text


def test_roi_json() -> None:
    out = json.loads(_ok("roi", "--gpu", "H100-SXM", "--replicas", "2", "--max-retries", "0", "--json"))
    assert out["fleet_cost_per_hour"] == pytest.approx(2 * get_gpu("H100-SXM").price_per_hour)
    assert [r["band"] for r in out["rows"]] == ["below", "around", "above"]
    assert out["inputs"]["max_retries"] == 0
    for row in out["rows"]:
        assert row["turbo_on"][0]["attempts_per_request"] == 1.0
    assert "ROI of enabling Turbo" in _ok("roi", "--gpu", "H100-SXM")


# ---- --from-run -----------------------------------------------------------------------------------------


def _fake_run(tmp_path: Path, scale: float, overload: bool = False) -> Path:
    """A sim-kind run whose mean TTFT and TPOT are ``scale`` × the planner's prediction at every step;
    ``overload`` adds steps at 1.3 and 1.6 × saturation where the excess is shed (503): two, because one
    failing step (the highest) is not yet a knee."""
    dep = with_profile(deployment(get_gpu("H100-SXM"), get_model("llama-3.2-1b")), DEFAULT_PROFILE)
    lm = latency_model(dep, 512, 256)
    rates = [0.2 * lm.saturation_rate, 0.4 * lm.saturation_rate, 0.6 * lm.saturation_rate]
    if overload:
        rates += [1.3 * lm.saturation_rate, 1.6 * lm.saturation_rate]
    steps, records = [], []
    t0, duration = 0.0, 20.0
    rid = 0
    for k, rate in enumerate(rates):
        steps.append(Step(k, t0, t0 + duration, rate))
        n = int(rate * duration)
        ttft, tpot = scale * lm.ttft(min(rate, 0.9 * lm.saturation_rate)), scale * lm.tpot(rate)
        e2e = ttft + 255 * tpot
        for j in range(n):
            s = t0 + j / rate
            tier = "turbo" if j % 5 == 0 else "standard"
            shed = rate > lm.saturation_rate and (j % 13) < 3  # 3 of 13 shed: ≈ 1 − 1/1.3
            records.append(RequestRecord(
                id=rid, step=k, offered_rps=rate, scheduled_s=s, sent_s=s, dispatch_lag_s=0.0, queue_s=0.0,
                end_s=s + (0.001 if shed else e2e), tier_asked=tier, tier_served=None if shed else tier,
                status=503 if shed else 200, ok=not shed, error="shed" if shed else None,
                ttft_s=None if shed else ttft, itl_s=(), tpot_s=None if shed else tpot,
                e2e_s=None if shed else e2e, prompt_tokens=None if shed else 512,
                output_tokens=None if shed else 256,
            ))
            rid += 1
        t0 += duration
    summary = summarize(records, steps, kind="sim", started_at="2026-01-01T00:00:00Z", duration_s=t0, config={})
    return write_run(tmp_path / "run", records, [], summary, report=False)


def test_from_run_shows_predicted_against_measured(tmp_path: Path) -> None:
    run = _fake_run(tmp_path, scale=1.25)
    args = ["--gpu", "H100-SXM", "--model", "llama-3.2-1b", "--prompt-tokens", "512", "--output-tokens", "256",
            "--from-run", str(run)]
    out = json.loads(_ok("capacity", *args, "--json"))
    cal = out["calibration"]
    assert cal["kind"] == "sim" and len(cal["points"]) == 3
    for p in cal["points"]:
        # predicted / measured − 1 = 1 / 1.25 − 1 = −20 %
        assert p["ttft_error"] == pytest.approx(-0.2, rel=1e-6)
        assert p["tpot_error"] == pytest.approx(-0.2, rel=1e-6)
    assert cal["measured_prompt_tokens"] == pytest.approx(512)
    measured_knee = load_run(run).summary.knee()
    assert cal["knee"]["measured_rps"] == measured_knee
    text = _ok("capacity", *args)
    assert "Predicted vs measured" in text and "-20.0%" in text


def test_from_run_feeds_matrix_and_roi(tmp_path: Path) -> None:
    run = _fake_run(tmp_path, scale=1.0, overload=True)
    knee = load_run(run).summary.knee()
    assert knee is not None  # the shed step bends the throughput curve
    args = ["--gpu", "H100-SXM", "--model", "llama-3.2-1b", "--from-run", str(run), "--json"]
    out = json.loads(_ok("matrix", *args, "--peak-rps", str(knee * 0.5)))
    assert out["knee_source"].startswith("measured") and out["knee_rps"] == pytest.approx(knee)
    assert out["label"] == "Turbo on"
    out = json.loads(_ok("matrix", *args, "--peak-rps", str(knee * 1.01)))
    assert out["label"] in ("Turbo capped", "Standard only")
    roi = json.loads(_ok("roi", *args))
    assert roi["knee_source"].startswith("measured") and roi["knee_rps"] == pytest.approx(knee)
    assert roi["calibration"]["knee"]["measured_rps"] == pytest.approx(knee)
    assert roi["rows"][0]["turbo_on"][0]["ttft_s"] is not None


def test_from_run_without_a_knee_keeps_the_prediction(tmp_path: Path) -> None:
    run = _fake_run(tmp_path, scale=1.0)
    assert load_run(run).summary.knee() is None
    out = json.loads(_ok("matrix", "--gpu", "H100-SXM", "--model", "llama-3.2-1b", "--from-run", str(run),
                         "--peak-rps", "1", "--json"))
    assert out["knee_source"] == "predicted"
    assert out["calibration"]["knee"]["measured_rps"] is None
