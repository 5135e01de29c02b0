"""The step-model fit behind ``turbogate emulate --calibrate-from`` (pure: synthetic runs with known constants)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from turbogate.emulator.calibrate import (
    CalibrationError,
    StepFit,
    factors_for,
    fit_from_engine_counters,
    fit_step_model,
)
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.perf.models import load_hf_config
from turbogate.results.schema import RequestRecord, Sample

STEP, PER_SEQ, PER_TOKEN = 0.004, 0.0015, 0.00002


def _engine_run(arrivals: list[float], output: int, prompt: int, max_seqs: int, jitter: float = 0.0,
                seed: int = 0, prefill_token_s: float = PER_TOKEN) -> list[RequestRecord]:
    """A continuous-batching engine stepped by hand: each step prefills the newly admitted requests and
    decodes one token for every running one; its time is the model's, plus client-side noise on each gap."""
    rng = random.Random(seed)
    now, pending, running = 0.0, list(range(len(arrivals))), []
    tokens: dict[int, list[float]] = {i: [] for i in range(len(arrivals))}
    while pending or running:
        if not running and pending and arrivals[pending[0]] > now:
            now = arrivals[pending[0]]
        admitted = []
        while pending and arrivals[pending[0]] <= now and len(running) + len(admitted) < max_seqs:
            admitted.append(pending.pop(0))
        now += STEP + PER_SEQ * (len(running) + len(admitted)) + prefill_token_s * prompt * len(admitted)
        for i in running + admitted:
            tokens[i].append(now + abs(rng.gauss(0.0, jitter)))
        running = [i for i in running + admitted if len(tokens[i]) < output]
    out = []
    for i, sent in enumerate(arrivals):
        times = sorted(tokens[i])
        out.append(RequestRecord(
            id=i, step=0, offered_rps=1.0, scheduled_s=sent, sent_s=sent, dispatch_lag_s=0.0, queue_s=0.0,
            end_s=times[-1], tier_asked=None, tier_served=None, status=200, ok=True, error=None,
            ttft_s=times[0] - sent, itl_s=tuple(b - a for a, b in itertools.pairwise(times)), tpot_s=None,
            e2e_s=times[-1] - sent, prompt_tokens=prompt, output_tokens=output))
    return out


def _ramp(n: int, rate_end: float) -> list[float]:
    t, out = 0.0, []
    for k in range(n):
        t += 1.0 / (rate_end * (k + 1) / n)
        out.append(t)
    return out


def _bursty(records: list[RequestRecord], every: int) -> list[RequestRecord]:
    """The same requests as a client on a busy machine reads them: tokens in bursts of ``every``."""
    out = []
    for r in records:
        assert r.ttft_s is not None
        times = list(itertools.accumulate(r.itl_s, initial=r.ttft_s))
        read = [times[min(len(times) - 1, (k // every + 1) * every - 1)] for k in range(len(times))]
        out.append(dataclasses.replace(r, itl_s=tuple(b - a for a, b in itertools.pairwise(read))))
    return out


def test_the_fit_recovers_the_constants_of_a_known_engine() -> None:
    records = _engine_run(_ramp(400, 60.0), output=32, prompt=64, max_seqs=8, prefill_token_s=0.0)
    fit = fit_step_model(records)
    assert fit.step_s == pytest.approx(STEP, rel=0.05)
    assert fit.per_seq_s == pytest.approx(PER_SEQ, rel=0.05)
    assert max(fit.batch_sizes) == 8 and min(fit.batch_sizes) <= 2
    # Whole requests, not single gaps: tokens read in bursts of 8 give the same fit.
    assert fit_step_model(_bursty(records, 8)).step_time(8) == pytest.approx(fit.step_time(8), rel=0.05)


def test_prefill_cost_is_folded_into_the_step_at_the_runs_prompt_length() -> None:
    fit = fit_step_model(_engine_run(_ramp(400, 60.0), output=32, prompt=64, max_seqs=8, jitter=0.0005))
    # A full batch admits one request every 4 steps or so (32 tokens / 8 seqs): + PER_TOKEN × 64 / 4 a step.
    assert fit.step_time(8) == pytest.approx(STEP + 8 * PER_SEQ + PER_TOKEN * 64 / 4, rel=0.15)


def test_the_engines_own_counters_give_the_step_when_scraped() -> None:
    samples, t, itl_sum, itl_count, steps, generated = [], 0.0, 0.0, 0.0, 0.0, 0.0
    for batch in (1, 1, 2, 2, 4, 4, 8, 8) * 3:
        for name, value in (("vllm:inter_token_latency_seconds_sum", itl_sum),
                            ("vllm:inter_token_latency_seconds_count", itl_count),
                            ("vllm:iteration_tokens_total_count", steps), ("vllm:generation_tokens_total", generated)):
            samples.append(Sample(t=t, source="http://e/metrics", name=name, value=value,
                                  labels={"engine": "0", "model_name": "m"}))
        n_steps = 1.0 / (STEP + PER_SEQ * batch)  # one second of steps at this batch
        itl_sum += n_steps * batch * (STEP + PER_SEQ * batch)
        itl_count += n_steps * batch
        steps += n_steps
        generated += n_steps * batch
        t += 1.0
    fit = fit_from_engine_counters(samples)
    assert fit is not None
    assert (fit.step_s, fit.per_seq_s) == (pytest.approx(STEP, rel=0.01), pytest.approx(PER_SEQ, rel=0.01))
    assert fit_from_engine_counters([s for s in samples if "inter_token" not in s.name]) is None


TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "head_dim": 32,
              "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
              "max_position_embeddings": 2048, "vocab_size": 512, "tie_word_embeddings": False}


def test_the_emulated_deployment_steps_as_fitted(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    fit = StepFit(STEP, PER_SEQ, 100, (1, 8), (0.0, 0.0))
    dep = deployment(get_gpu("H100-SXM"), load_hf_config(tmp_path))
    calibrated = replace(dep, factors=factors_for(dep, fit))
    for decoding in (1, 4, 8):
        assert calibrated.step_time(0, decoding, decoding * 100) == pytest.approx(fit.step_time(decoding), rel=0.02)


def test_a_model_too_large_for_the_fit_is_refused() -> None:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
    with pytest.raises(CalibrationError, match="own"):
        factors_for(dep, StepFit(STEP, PER_SEQ, 100, (1, 8), (0.0, 0.0)))


def test_a_run_without_streams_is_refused_with_a_reason() -> None:
    records = _engine_run([0.0, 0.1], output=4, prompt=8, max_seqs=2)
    with pytest.raises(CalibrationError, match="stream"):
        fit_step_model([dataclasses.replace(r, ttft_s=None) for r in records])
    with pytest.raises(CalibrationError, match="usable requests"):
        fit_step_model(records)


def test_emulate_calibrate_from_a_folder_that_is_no_run_says_so() -> None:
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as empty:
        proc = subprocess.run([sys.executable, "-m", "turbogate", "emulate", "--calibrate-from", empty],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not a run folder" in proc.stderr
