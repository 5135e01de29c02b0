"""The bench against a real emulator on 127.0.0.1: recomputation, the knee, the turbo-bench line, Ctrl-C."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from turbogate.bench.cli import app
from turbogate.perf import deployment, get_gpu, get_model, saturation
from turbogate.perf.profiles import DEFAULT_PROFILE, with_profile
from turbogate.procs import Service
from turbogate.results import load_run

BIN = Path(sys.executable).parent


def _bench_cmd() -> list[str]:
    exe = BIN / "turbo-bench"
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from turbogate.bench.cli import turbo_bench_main;"
                                                                   "turbo_bench_main()"]


def _generated_tokens(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "vllm:generation_tokens_total")


def _rows(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_turbo_bench_line_runs_and_says_gpu_util_is_unavailable(fast_emulator: Service, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [*_bench_cmd(), "--host", fast_emulator.url, "--route", "/v1/chat/completions", "--qps-start", "15",
           "--qps-end", "25", "--duration", "3", "--metrics", "gpu-util,mem-fragmentation,p95-latency",
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    if shutil.which("nvidia-smi") is None:
        assert "gpu-util: unavailable — no NVIDIA GPU/NVML found" in text
    for name in ("requests.jsonl", "samples.jsonl", "summary.json", "summary.csv", "report.html"):
        assert (out / name).is_file(), name
    run = load_run(out)
    assert run.summary.config["shape"] == "linear"
    offered = [s.step.offered_rps for s in run.summary.steps]
    assert offered == sorted(offered) and 15 <= offered[0] < offered[-1] <= 25
    assert 40 <= len(run.requests) <= 80 and all(r.ok for r in run.requests)
    names = {s.name for s in run.samples}
    assert "turbogate_emulator_kv_fragmentation" in names  # mem-fragmentation from the engine's /metrics
    assert "bench_p95_e2e_s" in names
    assert all(r.prompt_tokens and r.output_tokens == 128 for r in run.requests)


def test_bad_cli_input_is_named() -> None:
    runner = CliRunner()
    cases = [
        (["--host", "127.0.0.1:8000"], "--host"),
        (["--prompt-tokens", "1:2:3"], "--prompt-tokens"),
        (["--tiers", "gold=1"], "--tiers"),
        (["--shape", "exponential", "--qps-start", "0", "--qps-end", "5"], "exponential"),
        (["--arrivals", "uniform"], "--arrivals"),
        (["--slo", "ttft=fast"], "--slo"),
        (["--metrics", "gpu-util,magic"], "--metrics"),
    ]
    for args, needle in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert needle in res.output, (args, res.output)


def test_unreachable_target_is_a_clear_error(tmp_path: Path) -> None:
    from turbogate.procs import free_port

    res = CliRunner().invoke(app, ["--host", f"http://127.0.0.1:{free_port()}", "--duration", "1", "--out",
                                   str(tmp_path / "r")])
    assert res.exit_code == 1
    assert "cannot reach" in res.output


def _recompute(run_dir: Path) -> None:
    """Recompute summary.json from requests.jsonl with plain numpy, independently of turbogate.results."""
    reqs = _rows(run_dir / "requests.jsonl")
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    steps = summary["steps"]
    lowest = min(steps, key=lambda s: s["offered_rps"])
    fill = float(np.median([r["e2e_s"] for r in reqs if r["step"] == lowest["index"] and r["ok"]]))
    tiers = sorted({r["tier_asked"] for r in reqs if r["tier_asked"]})
    for st in steps:
        width = st["end_s"] - st["start_s"]
        for tier in [*tiers, "all"]:
            mine = [r for r in reqs if r["step"] == st["index"] and (tier == "all" or r["tier_asked"] == tier)]
            g = st["tiers"][tier]
            ok = [r for r in mine if r["ok"]]
            assert g["requests"] == len(mine) and g["ok"] == len(ok)
            # The completion window trails the step by the group's median schedule → completion time.
            leads = [r["end_s"] - r["scheduled_s"] for r in ok]
            shift = float(np.median(leads)) if leads else fill
            late = [math.inf] * sum(1 for r in mine if r["error"] and r["error"].startswith("unfinished"))
            done = [r for r in reqs if r["ok"] and (tier == "all" or r["tier_asked"] == tier)
                    and st["start_s"] + shift <= r["end_s"] < st["end_s"] + shift]
            assert g["achieved_rps"] == pytest.approx(len(done) / width)
            assert g["output_tokens_per_s"] == pytest.approx(sum(r["output_tokens"] for r in done) / width)
            for metric, values in (("ttft", [r["ttft_s"] for r in ok] + late), ("e2e", [r["e2e_s"] for r in ok] + late),
                                   ("tpot", [r["tpot_s"] for r in ok if r["tpot_s"] is not None]),
                                   ("itl", [x for r in ok for x in r["itl_s"]]),
                                   ("lag", [r["dispatch_lag_s"] for r in mine]),
                                   ("queue", [r["queue_s"] for r in mine])):
                if not values:
                    continue
                for q in (50, 90, 95, 99):
                    want = float(np.percentile(sorted(values), q))
                    got = g["latency"][metric][f"p{q}"]
                    assert got == pytest.approx(want) if math.isfinite(want) else got is None, metric
    for r in reqs:
        if r["ok"]:
            # vLLM's TPOT, and the send time is the scheduled time plus lag plus client queue time.
            assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1))
            assert r["sent_s"] == pytest.approx(r["scheduled_s"] + r["dispatch_lag_s"] + r["queue_s"], abs=1e-6)
            assert len(r["itl_s"]) >= 1


def test_summary_equals_recomputation_from_requests(
        emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    emu = emulator_factory("--time-scale", "0.05", "--gpu", "L4", "--model", "llama-3.2-1b", "--max-num-seqs", "8")
    out = tmp_path / "run"
    res = CliRunner().invoke(app, [
        "--host", emu.url, "--route", "/v1/completions", "--shape", "steps", "--qps-start", "10", "--qps-end", "30",
        "--steps", "3", "--duration", "4.5", "--prompt-tokens", "64:32:16:128", "--output-tokens", "24:8:8:40",
        "--tiers", "turbo=0.3,standard=0.7", "--max-concurrency", "6", "--api-key", "k1", "--api-key", "k2",
        "--random-seed", "5", "--no-live", "--out", str(out)])
    assert res.exit_code == 0, res.output
    _recompute(out)
    reqs = _rows(out / "requests.jsonl")
    assert {r["tier_asked"] for r in reqs} == {"turbo", "standard"}
    assert {r["api_key"] for r in reqs} == {0, 1}
    assert max(r["queue_s"] for r in reqs) > 0  # --max-concurrency 6 made some wait client-side
    assert all(r["prompt_tokens"] >= 16 for r in reqs if r["ok"])
    assert all(8 <= r["output_tokens"] <= 40 for r in reqs if r["ok"])


def test_knee_lands_near_the_perf_model_capacity(emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    gpu, model, seqs, scale, out_tokens = "L4", "llama-3.1-8b", 16, 0.2, 32
    emu = emulator_factory("--time-scale", str(scale), "--gpu", gpu, "--model", model, "--max-num-seqs", str(seqs))
    dep = with_profile(deployment(get_gpu(gpu), get_model(model)), DEFAULT_PROFILE)  # emulate's default profile
    # The emulator counts chat prompts as BOS + 5 framing tokens + content + 4: 128 content tokens → 138.
    expected = saturation(dep, 138, out_tokens, max_num_seqs=seqs).request_rate / scale
    out = tmp_path / "knee"
    res = CliRunner().invoke(app, [
        "--host", emu.url, "--shape", "steps", "--qps-start", f"{0.5 * expected:.3f}",
        "--qps-end", f"{1.5 * expected:.3f}", "--steps", "6", "--duration", "15", "--arrivals", "constant",
        "--prompt-tokens", "128", "--output-tokens", str(out_tokens), "--no-live", "--out", str(out)])
    assert res.exit_code == 0, res.output
    run = load_run(out)
    assert {r.prompt_tokens for r in run.requests if r.ok} == {138}
    knee = run.summary.knees["all"]
    assert knee.used == "throughput" and knee.value is not None
    print(f"knee {knee.value:.2f} req/s vs perf model {expected:.2f}")
    assert abs(knee.value - expected) / expected <= 0.15, (knee, expected)


def test_ctrl_c_stops_sending_and_still_writes_everything(
        emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    emu = emulator_factory("--time-scale", "0.2", "--gpu", "L4", "--model", "llama-3.2-1b")
    out = tmp_path / "run"
    proc = subprocess.Popen([*_bench_cmd(), "--host", emu.url, "--qps", "20", "--duration", "30",
                             "--output-tokens", "64", "--grace", "10", "--no-live", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "150"})
    # Wait until the emulator has generated tokens (the bench is sending), then interrupt.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None and _generated_tokens(emu.url) <= 0:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=60)
    text = stdout.decode()
    assert proc.returncode == 0, text
    assert "stopping" in text
    run = load_run(out)
    assert run.summary.interrupted
    unsent = [r for r in run.requests if r.sent_s is None]
    sent = [r for r in run.requests if r.sent_s is not None]
    assert unsent and sent and any(r.ok for r in sent)
    assert all(r.error and "not sent" in r.error for r in unsent)
    assert max(r.sent_s or 0 for r in sent) < min(r.scheduled_s for r in unsent)
    # The step in progress ends at the last send, so its throughput is not diluted by time never run.
    assert run.summary.steps[0].step.end_s == pytest.approx(max(r.sent_s or 0 for r in sent), abs=1e-3)
    assert (out / "report.html").is_file() and (out / "summary.csv").is_file()


def test_compare_two_runs_cli(fast_emulator: Service, tmp_path: Path) -> None:
    runs = []
    for i, rate in enumerate(("10", "20")):
        out = tmp_path / f"r{i}"
        res = CliRunner().invoke(app, ["--host", fast_emulator.url, "--qps", rate, "--duration", "1",
                                       "--no-live", "--no-report", "--out", str(out)])
        assert res.exit_code == 0, res.output
        runs.append(out)
    page = tmp_path / "ab.html"
    res = CliRunner().invoke(app, ["compare", str(runs[0]), str(runs[1]), "--html", str(page)])
    assert res.exit_code == 0, res.output
    assert "knee req/s" in res.output and "achieved req/s" in res.output
    assert 'id="fig-compare"' in page.read_text()
    res = CliRunner().invoke(app, ["compare", str(runs[0]), str(tmp_path / "nope")])
    assert res.exit_code == 2 and "not a run folder" in res.output


def test_find_knee_steps_up_then_bisects_to_the_capacity(
        emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    gpu, model, seqs, scale, out_tokens = "L4", "llama-3.1-8b", 16, 0.2, 32
    emu = emulator_factory("--time-scale", str(scale), "--gpu", gpu, "--model", model, "--max-num-seqs", str(seqs))
    expected = saturation(with_profile(deployment(get_gpu(gpu), get_model(model)), DEFAULT_PROFILE), 138, out_tokens,
                          max_num_seqs=seqs).request_rate / scale
    out = tmp_path / "fk"
    res = CliRunner().invoke(app, [
        "--host", emu.url, "--find-knee", "--qps-start", f"{0.6 * expected:.3f}", "--knee-growth", "1.5",
        "--bisections", "1", "--step-duration", "2.5", "--arrivals", "constant", "--prompt-tokens", "128",
        "--output-tokens", str(out_tokens), "--no-live", "--out", str(out)])
    assert res.exit_code == 0, res.output
    probes = [line for line in res.output.splitlines() if line.startswith("find-knee:")]
    assert "ok" in probes[0] and any("saturated" in p for p in probes)
    run = load_run(out)
    rates = [s.step.offered_rps for s in run.summary.steps]
    assert rates[1] == pytest.approx(1.5 * rates[0], rel=1e-3)  # stepped up by the growth factor
    assert rates[-1] < max(rates)  # then bisected back down
    knee = run.summary.knees["all"].value
    assert knee is not None and abs(knee - expected) / expected <= 0.15, (knee, expected)
