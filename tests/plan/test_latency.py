"""The load model: queueing formulas and the step-model fixed point, by hand."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbogate.perf import deployment, get_gpu, get_model, saturation
from turbogate.plan.knee import predicted_knee
from turbogate.plan.latency import LatencyModel, latency_model, prefill_chunks, priority_waits, sakasegawa_wait


def test_one_server_is_md1() -> None:
    # M/D/1: W = ρ / (2μ(1−ρ)); λ = 5, μ = 10: 0.5 / (2·10·0.5) = 0.05 s
    assert sakasegawa_wait(5.0, 10.0, 1) == pytest.approx(0.05)


def test_three_servers_by_hand() -> None:
    # ρ = 0.8, exponent √8 = 2.828427: 0.8^2.828427 = 0.531982; Lq = 0.531982 / 0.2 = 2.659911;
    # W = Lq / λ × (1 + 0) / 2 = 2.659911 / 8 / 2 = 0.166244 s
    assert sakasegawa_wait(8.0, 10.0, 3) == pytest.approx(0.166244, rel=1e-5)


def test_mm1_variability() -> None:
    # cs² = 1 (exponential service) doubles the M/D/1 wait: M/M/1 W = ρ / (μ(1−ρ)) = 0.1 s
    assert sakasegawa_wait(5.0, 10.0, 1, ca2=1.0, cs2=1.0) == pytest.approx(0.1)


def test_wait_edges() -> None:
    assert sakasegawa_wait(0.0, 10.0, 4) == 0.0
    assert math.isinf(sakasegawa_wait(10.0, 10.0, 4))
    with pytest.raises(ValueError):
        sakasegawa_wait(1.0, 10.0, 0)


@given(rate=st.floats(0.01, 9.9), share=st.floats(0.0, 1.0), servers=st.integers(1, 512))
@settings(max_examples=60, deadline=None)
def test_priority_conservation(rate: float, share: float, servers: int) -> None:
    """Cobham: the load-weighted mean of the two classes' waits is the FIFO wait."""
    w = sakasegawa_wait(rate, 10.0, servers)
    wt, ws = priority_waits(rate, 10.0, servers, share)
    assert share * wt + (1 - share) * ws == pytest.approx(w, rel=1e-9, abs=1e-15)
    assert wt <= w + 1e-15 <= ws + 2e-15


def test_priority_at_saturation_keeps_turbo_finite() -> None:
    # At ρ = 1: W·(1−ρ) = 1 / (2μ) = 0.05; Turbo (20 %): 0.05 / (1 − 0.2) = 0.0625; Standard unbounded
    wt, ws = priority_waits(10.0, 10.0, 1, 0.2)
    assert wt == pytest.approx(0.0625)
    assert math.isinf(ws)


# A load model with round numbers: s_idle 10 ms, s_sat 50 ms at c = 100, O = 100 → μ = 20 req/s, δ = 0.4 ms.
HAND = LatencyModel(prompt_tokens=200, output_tokens=100, batch_cap=100, bound="max_num_seqs",
                    saturation_rate=20.0, s_idle=0.010, s_sat=0.050, ttft0=0.020, ttft_full=0.060,
                    kv_tokens_per_seq=256, kv_capacity_tokens=51_200)


def test_hand_model_tpot_and_batch() -> None:
    assert HAND.delta == pytest.approx(0.0004)
    # λ = 10: s = 0.010 / (1 − 10·100·0.0004) = 0.010 / 0.6
    assert HAND.tpot(10.0) == pytest.approx(0.010 / 0.6)
    assert HAND.batch(10.0) == pytest.approx(10 * 100 * 0.010 / 0.6)
    # continuous at saturation: s(μ) = s_sat, n(μ) = c
    assert HAND.tpot(20.0 - 1e-9) == pytest.approx(0.050, rel=1e-6)
    assert HAND.batch(20.0 - 1e-9) == pytest.approx(100.0, rel=1e-6)
    assert HAND.tpot(25.0) == 0.050 and HAND.batch(25.0) == 100


def test_hand_model_ttft() -> None:
    assert HAND.ttft(0.0) == pytest.approx(0.020)
    n, s = HAND.batch(10.0), HAND.tpot(10.0)
    w = sakasegawa_wait(10.0, 20.0, 100)
    assert HAND.ttft(10.0) == pytest.approx(w + s / 2 + 0.020 + n / 100 * 0.040)
    assert HAND.e2e(10.0) == pytest.approx(HAND.ttft(10.0) + 99 * s)
    # KV in use: n × 256 / 51,200
    assert HAND.kv_utilization(10.0) == pytest.approx(n * 256 / 51_200)


def test_knee_is_where_e2e_doubles() -> None:
    knee = predicted_knee(HAND, 2.0)
    assert 0 < knee < HAND.saturation_rate
    assert HAND.e2e(knee) == pytest.approx(2 * HAND.e2e(0.0), rel=1e-9)
    assert HAND.e2e(knee * 0.99) < 2 * HAND.e2e(0.0)
    assert predicted_knee(HAND, 3.0) > knee
    with pytest.raises(ValueError):
        predicted_knee(HAND, 1.0)


def test_prefill_chunks() -> None:
    assert prefill_chunks(512, 8192) == (1, 512, 0)
    # 10,000 tokens in a 4,096 budget: 3 chunks of 3,334, mean cached context 3,334
    assert prefill_chunks(10_000, 4096) == (3, 3334, 3334)


def test_end_points_are_the_perf_model() -> None:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
    lm = latency_model(dep, 512, 256)
    sat = saturation(dep, 512, 256)
    assert lm.saturation_rate == sat.request_rate
    assert lm.s_sat == sat.step_time_s
    assert lm.batch_cap == sat.batch
    assert lm.s_idle == dep.decode_step_time(1, 640)
    assert lm.ttft0 == dep.prefill_time(512)
    assert lm.tpot(0.0) == lm.s_idle


@given(frac=st.floats(0.01, 0.99))
@settings(max_examples=40, deadline=None)
def test_fixed_point_and_chord_bound(frac: float) -> None:
    """s = s_idle + δ·λ·O·s holds, and (dense model) the chord is never faster than the step model."""
    dep = deployment(get_gpu("A100-80G-SXM"), get_model("llama-3.1-8b"))
    lm = latency_model(dep, 512, 256)
    rate = frac * lm.saturation_rate
    s = lm.tpot(rate)
    n = lm.batch(rate)
    assert s == pytest.approx(lm.s_idle + lm.delta * rate * 256 * s, rel=1e-9)
    nb = max(1, int(n))
    actual = dep.step_time(round(nb * 512 / 256), nb, nb * 640)
    assert lm.s_idle + lm.delta * nb >= actual * (1 - 1e-9)


def test_monotone_in_load() -> None:
    dep = deployment(get_gpu("L40S"), get_model("qwen2.5-7b"))
    lm = latency_model(dep, 1024, 128)
    rates = [lm.saturation_rate * f for f in (0.0, 0.2, 0.4, 0.6, 0.8, 0.95)]
    for a, b in itertools.pairwise(rates):
        assert lm.ttft(a) < lm.ttft(b)
        assert lm.tpot(a) < lm.tpot(b)
