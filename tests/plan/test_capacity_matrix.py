"""Capacity report and decision matrix, against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from turbogate.perf import GiB, deployment, get_gpu, get_model, saturation
from turbogate.plan.capacity import capacity, naive_bw_util
from turbogate.plan.knee import predicted_knee
from turbogate.plan.latency import LatencyModel
from turbogate.plan.matrix import STANDARD_ONLY, TURBO_CAPPED, TURBO_ON, MatrixInputs, decide, worst


def test_naive_bw_util_by_hand() -> None:
    # 17 req/s × 131,072 B/token × 768 tokens / 2.039e12 B/s = 1,711,276,032 / 2.039e12 = 8.3927e-4
    assert naive_bw_util(17, 131_072, 768, 2.039e12) == pytest.approx(8.3927e-4, rel=1e-4)
    # The circulating 0.987 needs seq_len = 0.987 × 2.039e12 / (17 × 131,072) ≈ 903,200 tokens
    assert naive_bw_util(17, 131_072, 903_200, 2.039e12) == pytest.approx(0.987, rel=1e-3)


def test_capacity_report_matches_perf() -> None:
    dep = deployment(get_gpu("A100-80G-SXM"), get_model("llama-3.1-8b"))
    r = capacity(dep, 512, 256, rates=[1.0, 17.0], batch_sizes=(1, 64, 256))
    sat = saturation(dep, 512, 256)
    assert r.kv_bytes_per_token == 131_072
    assert r.weights_bytes == dep.weights_bytes
    assert r.weights_bytes / GiB == pytest.approx(14.957, rel=1e-3)
    assert r.kv_capacity_tokens == dep.kv_capacity_tokens
    assert r.kv_concurrent_seqs == dep.kv_capacity_tokens // 640
    assert r.saturation_rate == sat.request_rate
    assert r.max_output_tokens_per_s == sat.output_tokens_per_s
    assert [d.batch for d in r.decode] == [1, 64, 256]
    assert r.decode[0].step_time_s == dep.decode_step_time(1, 640)
    assert r.decode[0].bound == "memory"
    assert r.compute_bound_batch is not None
    assert r.decode[2].bound == ("compute" if r.compute_bound_batch <= 256 else "memory")
    assert 0 < r.knee_rate < r.saturation_rate
    low, high = r.rates
    assert not low.point.saturated and high.point.saturated  # 17 req/s is past one A100's saturation
    assert high.naive_bw_util == pytest.approx(naive_bw_util(17, 131_072, 768, 2.039e12))
    assert low.hbm_util > low.naive_bw_util * 100  # decode traffic dwarfs the KV write rate
    d = r.to_dict()
    assert d["rates"][1]["ttft_s"] is None  # past saturation: unbounded, written as null


def test_hbm_traffic_is_a_time_average() -> None:
    # At 0.01 req/s a step still streams the weights, but the replica is idle 97 % of the time.
    dep = deployment(get_gpu("A100-80G-SXM"), get_model("llama-3.1-8b"))
    low, high = capacity(dep, 512, 256, rates=[0.01, 17.0]).rates
    assert low.hbm_util_busy > 0.5
    assert low.hbm_util == pytest.approx(low.hbm_util_busy * -math.expm1(-0.01 * low.point.e2e_s))
    assert low.hbm_util < 0.05
    assert high.hbm_util == high.hbm_util_busy, "past saturation the replica is always busy"


def test_capacity_rejects_bad_rates() -> None:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.2-1b"))
    with pytest.raises(ValueError, match="request rate"):
        capacity(dep, rates=[-1.0])
    with pytest.raises(ValueError, match="batch sizes"):
        capacity(dep, batch_sizes=(0,))


# Hand model: μ = 20 req/s, knee ≈ 12.5 (where E2E doubles), c = 100, KV 256 tokens/seq of 51,200.
HAND = LatencyModel(prompt_tokens=200, output_tokens=100, batch_cap=100, bound="max_num_seqs",
                    saturation_rate=20.0, s_idle=0.010, s_sat=0.050, ttft0=0.020, ttft_full=0.060,
                    kv_tokens_per_seq=256, kv_capacity_tokens=51_200)


def test_load_rule_bands() -> None:
    knee = predicted_knee(HAND)
    on = decide(HAND, MatrixInputs(peak_rps=0.9 * knee))
    assert on.mode == TURBO_ON and on.turbo_cap_share == 1.0
    capped = decide(HAND, MatrixInputs(peak_rps=(knee + 20.0) / 2))
    assert capped.mode == TURBO_CAPPED
    assert capped.turbo_cap_share == pytest.approx(knee / ((knee + 20.0) / 2))
    std = decide(HAND, MatrixInputs(peak_rps=20.0))
    assert std.mode == STANDARD_ONLY and std.turbo_cap_share == 0.0
    # two replicas halve the per-replica load: back to Turbo on; replicas for the peak at the knee
    two = decide(HAND, MatrixInputs(peak_rps=1.8 * knee, replicas=2))
    assert two.mode == TURBO_ON and two.per_replica_rps == pytest.approx(0.9 * knee)
    assert std.replicas_needed == 2  # ceil(20 / 12.5)


def test_kv_rule_threshold() -> None:
    # at 5 req/s: n = 5·100·s, s = 0.01 / (1 − 5·100·0.0004) = 0.0125 → n = 6.25; 6.25·256 / 51,200 = 3.125 %
    d = decide(HAND, MatrixInputs(peak_rps=5.0, kv_threshold=0.03))
    assert d.kv_utilization == pytest.approx(0.03125)
    assert d.mode == TURBO_CAPPED
    assert [r.verdict for r in d.rules if r.name == "kv_utilization"] == [TURBO_CAPPED]
    assert decide(HAND, MatrixInputs(peak_rps=5.0, kv_threshold=0.04)).mode == TURBO_ON


def test_lora_and_http2_rules() -> None:
    assert decide(HAND, MatrixInputs(peak_rps=1.0, lora_hot_loading=True)).mode == TURBO_CAPPED
    assert decide(HAND, MatrixInputs(peak_rps=1.0, http2_reuse=False)).mode == TURBO_CAPPED
    d = decide(HAND, MatrixInputs(peak_rps=25.0, lora_hot_loading=True))
    assert d.mode == STANDARD_ONLY  # the worst verdict wins
    assert {r.name for r in d.rules} == {"load", "kv_utilization", "lora_hot_loading", "http2_reuse"}
    assert all(r.reason for r in d.rules)


def test_measured_knee_overrides() -> None:
    d = decide(HAND, MatrixInputs(peak_rps=9.0), knee_rps=8.0, saturation_rps=10.0, knee_source="measured")
    assert d.mode == TURBO_CAPPED and d.knee_rps == 8.0 and d.knee_source == "measured"


def test_worst_and_input_checks() -> None:
    assert worst([TURBO_ON, TURBO_CAPPED, TURBO_ON]) == TURBO_CAPPED
    assert worst([TURBO_CAPPED, STANDARD_ONLY]) == STANDARD_ONLY
    with pytest.raises(ValueError):
        MatrixInputs(peak_rps=-1)
    with pytest.raises(ValueError):
        MatrixInputs(peak_rps=1, replicas=0)
    with pytest.raises(ValueError):
        MatrixInputs(peak_rps=1, kv_threshold=0)
