"""Cost and ROI terms against hand-computed cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbogate.perf import deployment, get_gpu, get_model
from turbogate.plan.latency import LatencyModel, latency_model
from turbogate.plan.roi import (
    RoiInputs,
    cold_fraction,
    expected_attempts,
    retry_fixed_point,
    reuse_model,
    roi,
)


def test_expected_attempts_by_hand() -> None:
    # p = 0.5, d = 1, R = 3: 1 + 0.5 + 0.25 + 0.125 = 1.875
    assert expected_attempts(0.5, 1.0, 3) == pytest.approx(1.875)
    # d = 0.5 → q = 0.25: 1 + 0.25 + 0.0625 + 0.015625 = 1.328125
    assert expected_attempts(0.5, 0.5, 3) == pytest.approx(1.328125)
    assert expected_attempts(0.9, 1.0, 0) == 1.0  # max_retries = 0: one attempt
    assert expected_attempts(0.9, 0.0, 5) == 1.0  # nobody retries
    # closed form (1 − q^(R+1)) / (1 − q)
    assert expected_attempts(0.6, 0.8, 7) == pytest.approx((1 - 0.48**8) / (1 - 0.48))


def test_expected_attempts_checks() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        expected_attempts(0.5, 0.5, -1)
    with pytest.raises(ValueError, match="retry_decay"):
        expected_attempts(0.5, 1.5, 3)


def test_retry_fixed_point_by_hand() -> None:
    under = retry_fixed_point(5.0, 10.0, 1.0, 3)
    assert under.fail_probability == 0.0 and under.served_rate == 5.0 and under.attempts_per_request == 1.0
    # Nobody retries, 2× overload: half the attempts are shed.
    no_retry = retry_fixed_point(2.0, 1.0, 0.0, 3)
    assert no_retry.fail_probability == pytest.approx(0.5)
    # d = 1, R = 1, λ = 2, C = 1: p = 1 − 1 / (2(1 + p)) → p² = 1/2 → p = 0.7071
    one = retry_fixed_point(2.0, 1.0, 1.0, 1)
    assert one.fail_probability == pytest.approx(math.sqrt(0.5), rel=1e-6)
    assert one.attempt_rate == pytest.approx(2.0 * (1 + math.sqrt(0.5)), rel=1e-6)
    assert one.served_rate == pytest.approx(1.0, rel=1e-6)  # the tier serves its capacity, no more


def test_cold_fraction() -> None:
    # 2 cold starts an hour × 900 s = 1,800 s of 3,600 s
    assert cold_fraction(2.0, 900.0) == 0.5
    assert cold_fraction(10.0, 900.0) == 1.0
    with pytest.raises(ValueError):
        cold_fraction(-1.0, 1.0)


# μ = 20 req/s per replica; P + O = 300 tokens per request.
HAND = LatencyModel(prompt_tokens=200, output_tokens=100, batch_cap=100, bound="max_num_seqs",
                    saturation_rate=20.0, s_idle=0.010, s_sat=0.050, ttft0=0.020, ttft_full=0.060,
                    kv_tokens_per_seq=256, kv_capacity_tokens=51_200)


def test_costs_by_hand() -> None:
    inputs = RoiInputs(price_per_gpu_hour=3.6, gpus_per_replica=2, replicas=1, price_per_mtok=1.0,
                       turbo_share=0.0, turbo_reservation=0.0)
    rep = roi(HAND, inputs, loads=[10.0])
    row = rep.rows[0]
    assert row.cost_per_hour == pytest.approx(7.2)
    off = row.turbo_off
    # 7.2 USD/h over 10 req/s × 3,600 s = 0.0002 USD per request → 0.2 per 1,000; per token 0.0002 / 300
    assert off.cost_per_1k_requests == pytest.approx(0.2)
    assert off.cost_per_mtok == pytest.approx(0.0002 / 300 * 1e6)
    # revenue: 10 req/s × 3,600 × 300 tokens × 1 USD / 1M = 10.8 USD/h; no Turbo traffic → no ROI
    assert row.revenue_off == pytest.approx(10.8)
    assert row.roi == pytest.approx(0.0)


def test_turbo_premium_is_the_roi_under_the_knee() -> None:
    # 20 % Turbo at 2× price, everything served within SLO: extra revenue = 0.2 × revenue
    inputs = RoiInputs(price_per_gpu_hour=3.6, replicas=1, price_per_mtok=1.0, turbo_share=0.2,
                       turbo_multiplier=2.0, turbo_slo_ttft_s=1.0)
    row = roi(HAND, inputs, loads=[5.0]).rows[0]
    assert row.band == "below"
    assert row.revenue_off == pytest.approx(5 * 3600 * 300 / 1e6)
    assert row.revenue_on == pytest.approx(1.2 * row.revenue_off)
    assert row.roi == pytest.approx(0.2 * row.revenue_off / 3.6)
    turbo, std = row.turbo_on
    # Turbo pays its 20 % reservation (its use is 1 req/s of 20 = 5 %)
    assert turbo.cost_share == pytest.approx(0.2) and std.cost_share == pytest.approx(0.8)
    assert turbo.cost_per_1k_requests == pytest.approx(3.6 * 0.2 / (1.0 * 3600) * 1000)


def test_missed_turbo_slo_earns_the_standard_price() -> None:
    inputs = RoiInputs(price_per_gpu_hour=3.6, price_per_mtok=1.0, turbo_share=0.2, turbo_slo_ttft_s=0.001)
    row = roi(HAND, inputs, loads=[5.0]).rows[0]
    assert not row.turbo_on[0].slo_met
    assert row.roi == pytest.approx(0.0)


def test_reservation_sheds_standard_above_saturation() -> None:
    inputs = RoiInputs(price_per_gpu_hour=1.0, price_per_mtok=1.0, turbo_share=0.1, turbo_reservation=0.5,
                       retry_decay=0.0)
    row = roi(HAND, inputs, loads=[30.0]).rows[0]
    turbo, std = row.turbo_on
    assert row.band == "above"
    assert turbo.served_rps == pytest.approx(3.0)  # priority: all of it
    assert std.served_rps == pytest.approx(10.0)  # (1 − 0.5) × 20
    assert row.turbo_off.served_rps == pytest.approx(20.0)
    assert std.shed_rate == pytest.approx(17.0 / 27.0)
    assert std.ttft_s is not None  # 13 of 20 req/s served: the held reservation idles, nobody queues long
    # Without a reservation the fleet runs at ρ = 1: Turbo keeps a finite wait, Standard's is unbounded.
    full = roi(HAND, RoiInputs(price_per_gpu_hour=1.0, price_per_mtok=1.0, turbo_share=0.1, turbo_reservation=0.0,
                               retry_decay=0.0), loads=[30.0]).rows[0]
    assert full.turbo_on[1].served_rps == pytest.approx(17.0)
    assert full.turbo_on[0].ttft_s is not None
    assert full.turbo_on[1].ttft_s is None


def test_break_even_default_price() -> None:
    inputs = RoiInputs(price_per_gpu_hour=3.6, turbo_share=0.0)
    rep = roi(HAND, inputs)
    around = next(r for r in rep.rows if r.band == "around")
    assert around.load_rps == pytest.approx(rep.knee_rps)
    assert around.revenue_off == pytest.approx(around.cost_per_hour)
    assert [r.band for r in rep.rows] == ["below", "around", "above"]


def test_cold_starts_cut_capacity() -> None:
    inputs = RoiInputs(price_per_gpu_hour=1.0, replicas=2, cold_starts_per_hour=1.0, cold_start_s=360.0)
    rep = roi(HAND, inputs)
    assert rep.saturation_rps == pytest.approx(2 * 20.0 * 0.9)


def test_memory_reuse_raises_capacity() -> None:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
    base = reuse_model(dep, 2048, 128, 0.0)
    assert base == latency_model(dep, 2048, 128)
    reused = reuse_model(dep, 2048, 128, 0.75)
    assert reused.saturation_rate > base.saturation_rate
    assert reused.batch_cap == base.batch_cap  # reused tokens still hold their KV blocks
    with pytest.raises(ValueError, match="memory_reuse"):
        RoiInputs(price_per_gpu_hour=1.0, memory_reuse=1.0)


@given(rate=st.floats(0.0, 100.0), capacity=st.floats(0.1, 50.0), decay=st.floats(0.0, 1.0),
       retries=st.integers(0, 6))
@settings(max_examples=80, deadline=None)
def test_retry_fixed_point_properties(rate: float, capacity: float, decay: float, retries: int) -> None:
    out = retry_fixed_point(rate, capacity, decay, retries)
    assert 1.0 <= out.attempts_per_request <= retries + 1 + 1e-9
    # a tier serves what reaches it, up to its capacity, never more
    assert out.served_rate == pytest.approx(min(out.attempt_rate, capacity), rel=1e-6, abs=1e-9)
    assert out.served_rate <= rate * out.attempts_per_request + 1e-9
    # and p is the shed share at the attempt rate it causes (the fixed point holds)
    expected_p = max(0.0, 1.0 - capacity / out.attempt_rate) if out.attempt_rate > 0 else 0.0
    assert out.fail_probability == pytest.approx(expected_p, abs=1e-6)
