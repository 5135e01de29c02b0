"""Engine /metrics text → ReplicaLoad through prometheus_client's parser (pure, no sockets)."""

from __future__ import annotations

from turbogate.gateway.scrape import samples_from_text
from turbogate.sched import load_from_samples

VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="m"} 1.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_count{model_name="m"} 2.0
vllm:e2e_request_latency_seconds_sum{model_name="m"} 0.5
"""

SGLANG = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="q"} 7
sglang:num_queue_reqs{model_name="q"} 1
sglang:token_usage{model_name="q"} 0.9
"""


def test_vllm_text_sums_label_sets() -> None:
    load = load_from_samples("vllm", samples_from_text(VLLM))
    assert (load.running, load.waiting, load.kv_usage) == (5.0, 4.0, 0.42)


def test_unwanted_lines_are_skipped_but_wanted_ones_kept() -> None:
    samples = samples_from_text(VLLM)
    assert "vllm:e2e_request_latency_seconds_count" not in samples
    full = samples_from_text(VLLM, wanted=())
    assert full["vllm:e2e_request_latency_seconds_count"] == 2.0
    assert full["vllm:num_requests_running"] == samples["vllm:num_requests_running"]


def test_sglang_text() -> None:
    load = load_from_samples("sglang", samples_from_text(SGLANG))
    assert (load.running, load.waiting, load.kv_usage) == (7.0, 1.0, 0.9)


def test_cache_usage_of_data_parallel_engines_is_the_fullest_not_the_sum() -> None:
    text = VLLM + 'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7\n'
    # Summed, 0.42 + 0.7 = 1.12 would read as a percentage (1.12 %): a full replica seen as light.
    assert load_from_samples("vllm", samples_from_text(text)).kv_usage == 0.7


VLLM_BY_REASON = VLLM + """# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 1.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 3.0
"""


def test_waiting_by_reason_counts_only_what_waits_for_capacity() -> None:
    # vLLM's total (4) includes requests deferred for a KV transfer or a LoRA budget: not a full replica.
    samples = samples_from_text(VLLM_BY_REASON)
    assert samples["vllm:num_requests_waiting"] == 4.0
    assert samples['vllm:num_requests_waiting_by_reason{reason="deferred"}'] == 3.0
    assert load_from_samples("vllm", samples).waiting == 1.0
    # An older vLLM without the split: the total.
    assert load_from_samples("vllm", samples_from_text(VLLM)).waiting == 4.0


ITL = """# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 40.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 90.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 1.25
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 90.0
vllm:inter_token_latency_seconds_sum{engine="1",model_name="m"} 0.75
vllm:inter_token_latency_seconds_count{engine="1",model_name="m"} 10.0
"""


def test_the_inter_token_latency_counters_are_read_summed_and_its_buckets_skipped() -> None:
    samples = samples_from_text(VLLM + ITL)
    assert not any(name.endswith("_bucket") for name in samples)
    load = load_from_samples("vllm", samples)
    assert (load.itl_sum_s, load.itl_tokens) == (2.0, 100.0)
    older = ITL.replace("inter_token_latency_seconds", "time_per_output_token_seconds")
    assert load_from_samples("vllm", samples_from_text(VLLM + older)).itl_tokens == 100.0
    sglang = SGLANG + ITL.replace("vllm:", "sglang:")
    assert load_from_samples("sglang", samples_from_text(sglang)).itl_sum_s == 2.0
    assert load_from_samples("vllm", samples_from_text(VLLM)).itl_sum_s is None
