"""Tier words and the engine-metric mapping."""

from __future__ import annotations

import pytest

from turbogate.sched import Tier, load_from_samples, parse_tier, resolve_tier

ALL = frozenset(Tier)


@pytest.mark.parametrize(
    ("word", "tier"),
    [("priority", Tier.TURBO), ("TURBO", Tier.TURBO), ("default", Tier.STANDARD), ("auto", Tier.STANDARD),
     ("standard", Tier.STANDARD), ("flex", Tier.RELAX), (" relax ", Tier.RELAX)],
)
def test_aliases(word: str, tier: Tier) -> None:
    assert parse_tier(word) is tier


@pytest.mark.parametrize("word", ["scale", "", "fast", 3, None])
def test_unknown_words(word: object) -> None:
    assert parse_tier(word) is None


def test_not_entitled_to_turbo_is_served_standard() -> None:
    assert resolve_tier(Tier.TURBO, frozenset({Tier.STANDARD, Tier.RELAX}), ALL) is Tier.STANDARD


def test_turbo_switched_off_is_served_standard() -> None:
    assert resolve_tier(Tier.TURBO, ALL, frozenset({Tier.STANDARD, Tier.RELAX})) is Tier.STANDARD
    assert resolve_tier(Tier.TURBO, ALL, ALL) is Tier.TURBO


def test_relax_only_tenant_asking_standard_gets_relax() -> None:
    assert resolve_tier(Tier.STANDARD, frozenset({Tier.RELAX}), ALL) is Tier.RELAX


def test_vllm_names_and_cache_fallback() -> None:
    load = load_from_samples("vllm", {"vllm:num_requests_running": 3, "vllm:num_requests_waiting": 2,
                                      "vllm:gpu_cache_usage_perc": 0.5})
    assert (load.running, load.waiting, load.kv_usage) == (3, 2, 0.5)
    newer = load_from_samples("vllm", {"vllm:kv_cache_usage_perc": 0.7, "vllm:gpu_cache_usage_perc": 0.1})
    assert newer.kv_usage == 0.7


def test_other_engines() -> None:
    sg = load_from_samples("sglang", {"sglang:num_running_reqs": 5, "sglang:num_queue_reqs": 1,
                                      "sglang:token_usage": 0.9})
    assert (sg.running, sg.waiting, sg.kv_usage) == (5, 1, 0.9)
    tgi = load_from_samples("tgi", {"tgi_batch_current_size": 4, "tgi_queue_size": 7})
    assert (tgi.running, tgi.waiting, tgi.kv_usage) == (4, 7, None)
    lc = load_from_samples("llamacpp", {"llamacpp:requests_processing": 1, "llamacpp:requests_deferred": 2,
                                        "llamacpp:kv_cache_usage_ratio": 0.25})
    assert (lc.running, lc.waiting, lc.kv_usage) == (1, 2, 0.25)


def test_percent_is_read_as_fraction_and_unknown_kind_autodetects() -> None:
    assert load_from_samples("vllm", {"vllm:kv_cache_usage_perc": 85.0}).kv_usage == pytest.approx(0.85)
    auto = load_from_samples("openai", {"sglang:num_running_reqs": 2})
    assert auto.running == 2
    assert load_from_samples("vllm", {"unrelated": 1.0}).running is None
