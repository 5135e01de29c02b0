"""Each term issue 40 added to the perf model does what docs/plan.md says it does, and nothing else."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from turbogate.engine import EngineConfig, Request
from turbogate.perf import Deployment, deployment, get_gpu, get_model
from turbogate.perf.profiles import ENGINE_PROFILES, get_profile, with_profile
from turbogate.perf.roofline import FRONTEND_BUSY_CAP
from turbogate.plan.latency import latency_model
from turbogate.plan.replay import _Driver, burst, closed_loop, fixed, lognormal, open_arrivals

H100 = get_gpu("H100-SXM")
LLAMA_8B = get_model("llama-3.1-8b")
LLAMA_70B = get_model("llama-3.3-70b")


def test_the_front_end_adds_to_ttft_and_to_nothing_on_the_gpu() -> None:
    dep = deployment(H100, LLAMA_8B)
    slow = dep.with_factors(frontend_s=0.05)
    assert slow.step_time(512, 10, 10 * 600) == dep.step_time(512, 10, 10 * 600)
    before, after = latency_model(dep, 512, 128), latency_model(slow, 512, 128)
    assert after.ttft(1.0) - before.ttft(1.0) == pytest.approx(0.05)
    assert after.tpot(1.0) == before.tpot(1.0) and after.saturation_rate == before.saturation_rate
    cfg = EngineConfig()
    a, b = open_arrivals(dep, cfg, 20, fixed(512, 64), rate=2.0), open_arrivals(slow, cfg, 20, fixed(512, 64), rate=2.0)
    assert b.ttft("median") - a.ttft("median") == pytest.approx(0.05, abs=1e-9)


def test_the_smooth_ridge_costs_two_to_the_one_over_p_at_the_ridge_and_nothing_far_from_it() -> None:
    dep = deployment(H100, LLAMA_8B).with_factors(step_overhead_s=0.0, per_seq_overhead_s=0.0)
    ridge = dep.decode_compute_bound_batch(0)
    assert ridge is not None
    p = 4.0
    smooth = dep.with_factors(ridge_exponent=p)
    ratio = smooth.decode_step_time(ridge, 0) / dep.decode_step_time(ridge, 0)
    assert 1.1 < ratio <= 2 ** (1 / p) + 1e-9
    assert smooth.decode_step_time(1, 0) == pytest.approx(dep.decode_step_time(1, 0), rel=1e-3)
    assert smooth.prefill_time(8192) == pytest.approx(dep.prefill_time(8192), rel=1e-2)


def test_all_reduce_latency_grows_per_doubling_of_tp() -> None:
    base = deployment(H100, LLAMA_70B, tp=2).with_factors(tp_allreduce_s=25e-6, tp_allreduce_growth_s=20e-6)
    assert base.allreduce_latency_s == pytest.approx(25e-6)
    assert replace(base, tp=4).allreduce_latency_s == pytest.approx(45e-6)
    assert replace(base, tp=8).allreduce_latency_s == pytest.approx(65e-6)
    assert replace(base, tp=1).allreduce_latency_s == 0.0


def test_engine_scales_multiply_the_gpus_own_efficiencies() -> None:
    h200 = deployment(get_gpu("H200"), LLAMA_8B)
    assert h200.bw_efficiency == 0.7
    assert h200.with_factors(bw_scale=1.2).bw_efficiency == pytest.approx(0.84)
    assert h200.with_factors(bw_scale=1.5, bw_efficiency=0.9).bw_efficiency == 1.0  # capped
    measured = deployment(replace(get_gpu("H200"), mfu=0.62), LLAMA_8B)
    assert measured.effective_mfu == pytest.approx(0.62)
    assert measured.with_factors(mfu_scale=0.8).effective_mfu == pytest.approx(0.496)
    assert measured.with_factors(mfu=0.5).effective_mfu == 0.5  # an explicit factor wins over the GPU's
    with pytest.raises(ValueError, match="bw_scale"):
        h200.with_factors(bw_scale=2.0)


def test_moe_routing_scale_reads_fewer_experts_and_leaves_dense_models_alone() -> None:
    mixtral = deployment(H100, get_model("mixtral-8x7b"), tp=2)
    correlated = mixtral.with_factors(moe_routing_scale=0.25)
    assert correlated.decode_step_time(4, 4 * 500) < mixtral.decode_step_time(4, 4 * 500)
    assert correlated.decode_step_time(1, 500) == mixtral.decode_step_time(1, 500)  # one token: its experts
    dense = deployment(H100, LLAMA_8B)
    assert dense.with_factors(moe_routing_scale=0.25).decode_step_time(8, 8000) == dense.decode_step_time(8, 8000)


def test_ttft_steps_hold_the_first_token_back_that_many_decode_steps() -> None:
    dep = deployment(H100, LLAMA_8B)
    multi = dep.with_factors(ttft_steps=4.5)
    lm, lm_multi = latency_model(dep, 256, 128), latency_model(multi, 256, 128)
    assert lm_multi.ttft(5.0) - lm.ttft(5.0) == pytest.approx(4.5 * lm.tpot(5.0))
    cfg = EngineConfig()
    plain, held = burst(dep, cfg, 4, 256, 32), burst(multi, cfg, 4, 256, 32)
    assert held.ttft("mean") > plain.ttft("mean")
    assert held.duration == pytest.approx(plain.duration)  # the GPU's work is the same


def test_a_closed_loop_keeps_its_clients_busy_and_counts_each_request_once() -> None:
    dep = deployment(H100, LLAMA_8B)
    run = closed_loop(dep, EngineConfig(), 8, 64, fixed(512, 64))
    assert len(run.timings) == 64
    steady = run.steady(8)
    assert len(steady.timings) == 48
    assert math.isclose(steady.closed_loop_tokens_per_s(8), 8 * 64 / steady.e2e("mean"))
    assert run.itl("median") > 0 and run.tpot("mean") >= run.itl("median") * 0.9


def test_every_profile_builds_a_deployment_and_base_is_the_default_factors() -> None:
    dep = deployment(H100, LLAMA_70B, tp=4)
    assert with_profile(dep, "base").factors == dep.factors
    for name in ENGINE_PROFILES:
        prof = get_profile(name)
        assert prof.max_num_batched_tokens >= prof.max_num_seqs
        assert with_profile(dep, prof).step_time(2048, 32, 32 * 1000) > 0


def test_the_front_end_per_token_grows_ttft_with_the_prompt_only() -> None:
    dep = deployment(H100, LLAMA_8B)
    tokenising = dep.with_factors(frontend_s=0.005, frontend_per_token_s=0.00002)
    assert tokenising.frontend_time(0) == pytest.approx(0.005)
    assert tokenising.frontend_time(5000) == pytest.approx(0.005 + 0.1)
    for prompt in (128, 4096):
        extra = latency_model(tokenising, prompt, 64).ttft(1.0) - latency_model(dep, prompt, 64).ttft(1.0)
        assert extra == pytest.approx(0.005 + 0.00002 * prompt)
    a = open_arrivals(dep, EngineConfig(), 10, fixed(2000, 16), rate=1.0)
    b = open_arrivals(tokenising, EngineConfig(), 10, fixed(2000, 16), rate=1.0)
    assert b.ttft("median") - a.ttft("median") == pytest.approx(0.045, abs=1e-9)
    assert b.tpot("median") == pytest.approx(a.tpot("median"))


def test_the_decode_all_reduce_applies_to_decode_only_steps() -> None:
    dep = deployment(H100, LLAMA_70B, tp=4).with_factors(tp_allreduce_s=0.00003, tp_allreduce_growth_s=0.00002)
    graphed = dep.with_factors(decode_allreduce_s=0.00001)
    assert dep.decode_allreduce_latency_s == dep.allreduce_latency_s == pytest.approx(0.00005)
    saved = 2 * LLAMA_70B.n_layers * (0.00005 - 0.00001)
    assert dep.decode_step_time(8, 8000) - graphed.decode_step_time(8, 8000) == pytest.approx(saved)
    assert graphed.step_time(512, 8, 8000) == dep.step_time(512, 8, 8000)  # a prefill in the step: eager
    assert deployment(H100, LLAMA_8B).with_factors(decode_allreduce_s=0.00001).decode_allreduce_latency_s == 0.0


def test_a_spread_of_output_lengths_keeps_the_mean_and_repeats_with_its_seed() -> None:
    dep = deployment(H100, LLAMA_70B, tp=2, weight_dtype="fp8")
    cfg = EngineConfig()
    locked = closed_loop(dep, cfg, 16, 160, fixed(5000, 200))
    spread = closed_loop(dep, cfg, 16, 160, fixed(5000, 200), output_spread=0.2)
    outputs = [t.output_tokens for t in spread.timings]
    assert 160 <= min(outputs) < 200 < max(outputs) <= 240
    assert abs(sum(outputs) / len(outputs) - 200) < 10
    assert {t.output_tokens for t in locked.timings} == {200}
    assert closed_loop(dep, cfg, 16, 160, fixed(5000, 200), output_spread=0.2).timings == spread.timings  # seeded


def test_sharegpt_lengths_keep_their_means_within_bench_servings_bounds() -> None:
    draw = lognormal(224, 189, 0.6)
    rng = random.Random(3)
    pairs = [draw(rng) for _ in range(20000)]
    assert all(4 <= p <= 1024 and o >= 4 and p + o <= 2048 for p, o in pairs)
    assert sum(p for p, _ in pairs) / len(pairs) == pytest.approx(224, rel=0.03)
    assert sum(o for _, o in pairs) / len(pairs) == pytest.approx(189, rel=0.03)
    assert max(o for _, o in pairs) > 3 * 189  # the long tail the mean alone leaves out


def test_vllm_v0_runs_its_own_scheduling_in_the_engine_and_ttft_steps_only_in_the_closed_form() -> None:
    from turbogate.engine.profiled import profile_config

    v0, v1 = get_profile("vllm-v0"), get_profile("vllm-v1")
    cfg = profile_config(v0)
    assert (cfg.chunked_prefill, cfg.num_scheduler_steps, cfg.max_num_batched_tokens) == (False, 10, 4096)
    assert cfg.output_lag_steps == v0.output_lag_steps
    cfg = replace(cfg, output_lag_steps=0)  # to compare with and without the lag below
    assert (profile_config(v1).chunked_prefill, profile_config(v1).num_scheduler_steps) == (True, 1)
    dep = with_profile(deployment(H100, LLAMA_8B), v0)
    assert dep.factors.ttft_steps > 0
    # Under multi-step the engine waits for the run itself; ttft_steps would count that wait twice.
    as_v0 = burst(dep, cfg, 1, 256, 32)
    no_wait = burst(dep.with_factors(ttft_steps=0.0), cfg, 1, 256, 32)
    assert as_v0.ttft() == pytest.approx(no_wait.ttft())
    lagged = burst(dep, replace(cfg, output_lag_steps=v0.output_lag_steps), 1, 256, 32)
    assert lagged.ttft() > as_v0.ttft()


def test_the_front_end_busy_with_streamed_tokens_adds_nothing_while_nothing_streams() -> None:
    dep = deployment(H100, LLAMA_8B).with_factors(frontend_s=0.005, frontend_per_token_s=0.00003)
    busy = dep.with_factors(frontend_per_streamed_token_s=0.001)
    front = 0.005 + 0.00003 * 500  # 20 ms of the request's own front-end work
    assert busy.frontend_wait(500, 0.0) == 0.0 and dep.frontend_wait(500, 200.0) == 0.0
    assert busy.frontend_wait(500, 200.0) == pytest.approx(front * 0.2 / 0.8)  # ρ = 200 tokens/s × 1 ms
    assert busy.frontend_wait(500, 1e6) == pytest.approx(front * FRONTEND_BUSY_CAP / (1 - FRONTEND_BUSY_CAP))
    # Closed form: nothing runs at no load; at a load the running requests stream one token per step each.
    lm, lm_busy = latency_model(dep, 500, 200), latency_model(busy, 500, 200)
    assert lm_busy.ttft(0.0) == lm.ttft(0.0)
    rate = 2.0
    rho = 0.001 * lm.batch(rate) / lm.tpot(rate)
    assert 0.05 < rho < FRONTEND_BUSY_CAP
    assert lm_busy.ttft(rate) - lm.ttft(rate) == pytest.approx(front * rho / (1 - rho))
    assert lm_busy.tpot(rate) == lm.tpot(rate) and lm_busy.saturation_rate == lm.saturation_rate
    # Engine: one client (its last request finished when it sends the next) or a burst: nobody streams.
    cfg = EngineConfig()
    assert closed_loop(busy, cfg, 1, 6, fixed(500, 64)).timings == closed_loop(dep, cfg, 1, 6, fixed(500, 64)).timings
    assert burst(busy, cfg, 4, 500, 64).timings == burst(dep, cfg, 4, 500, 64).timings


def test_the_front_end_busy_with_streamed_tokens_delays_a_request_that_arrives_while_others_stream() -> None:
    dep = deployment(H100, LLAMA_8B).with_factors(frontend_s=0.05)
    step = dep.decode_step_time(1, 1000)
    per = 0.5 * step  # one other request streams a token per step: the front end is half busy
    busy = dep.with_factors(frontend_per_streamed_token_s=per)

    def late_ttft(d: Deployment) -> float:
        driver = _Driver(d, EngineConfig())
        driver.submit(Request("streaming", 900, 400), 0.0)
        driver.submit(Request("late", 900, 4), 1.0)  # the first is decoding by then
        return next(t.ttft for t in driver.run().timings if t.output_tokens == 4)

    extra = late_ttft(busy) - late_ttft(dep)
    assert extra == pytest.approx(0.05 * 0.5 / 0.5, abs=2 * step)  # 50 ms more, give or take the step it joins
    assert busy.step_time(512, 10, 6000) == dep.step_time(512, 10, 6000)  # never GPU time
