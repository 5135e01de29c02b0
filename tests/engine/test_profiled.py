"""One engine config per profile: its limits where none are given, its scheduling terms always."""

from __future__ import annotations

from dataclasses import replace

import pytest

from turbogate.engine import EngineConfig
from turbogate.engine.profiled import first_token_wait_steps, profile_config
from turbogate.perf.profiles import DEFAULT_PROFILE, ENGINE_PROFILES, get_profile

V0 = get_profile("vllm-v0")


def test_vllm_v0_carries_its_scheduling_terms_under_any_limits() -> None:
    assert (V0.chunked_prefill, V0.num_scheduler_steps, V0.output_lag_steps) != (
        EngineConfig().chunked_prefill, EngineConfig().num_scheduler_steps, EngineConfig().output_lag_steps)
    for cfg in (profile_config("vllm-v0"), profile_config(V0, 8, 2048, policy="priority", num_gpu_blocks=64)):
        assert (cfg.chunked_prefill, cfg.num_scheduler_steps, cfg.output_lag_steps) == (
            V0.chunked_prefill, V0.num_scheduler_steps, V0.output_lag_steps)
    given = profile_config(V0, 8, 2048, policy="priority", num_gpu_blocks=64)
    assert (given.max_num_seqs, given.max_num_batched_tokens, given.policy, given.num_gpu_blocks) == (
        8, 2048, "priority", 64)
    own = profile_config(V0)
    assert (own.max_num_seqs, own.max_num_batched_tokens) == (V0.max_num_seqs, V0.max_num_batched_tokens)


@pytest.mark.parametrize("name", [DEFAULT_PROFILE, "base"])
def test_profiles_without_v0_terms_build_the_plain_config(name: str) -> None:
    cfg = profile_config(name, 8, 2048, policy="priority", num_gpu_blocks=64)
    assert cfg == EngineConfig(max_num_seqs=8, max_num_batched_tokens=2048, policy="priority", num_gpu_blocks=64)
    # and vllm-v0 differs from it in its scheduling terms only
    v0 = profile_config(V0, 8, 2048, policy="priority", num_gpu_blocks=64)
    assert replace(v0, chunked_prefill=cfg.chunked_prefill, num_scheduler_steps=cfg.num_scheduler_steps,
                   output_lag_steps=cfg.output_lag_steps) == cfg


def test_only_the_profiles_own_budget_rises_to_max_num_seqs() -> None:
    seqs = V0.max_num_batched_tokens * 2
    assert profile_config(V0, seqs).max_num_batched_tokens == seqs
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        profile_config(V0, seqs, V0.max_num_batched_tokens)  # a budget given below max_num_seqs: vLLM refuses it


def test_first_token_waits_ttft_steps_only_where_the_engine_does_not_run_multi_step() -> None:
    assert V0.factors.ttft_steps != V0.output_lag_steps
    # the engine built for the profile applies the lag itself: a driver adds none
    assert first_token_wait_steps(V0.factors, profile_config(V0), V0.output_lag_steps) == 0
    plain = replace(profile_config(V0), output_lag_steps=0)
    assert first_token_wait_steps(V0.factors, plain, V0.output_lag_steps) == V0.output_lag_steps
    for prof in ENGINE_PROFILES.values():
        if prof.num_scheduler_steps == 1:
            assert first_token_wait_steps(prof.factors, profile_config(prof), 0) == prof.factors.ttft_steps
