"""/metrics under vLLM's names, parsed with prometheus_client, moving under real load."""

from __future__ import annotations

import threading
import time

import openai
import pytest

from tests.emulator.conftest import MODEL, scrape
from turbogate.procs import Service

NAMES = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds_count",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:request_queue_time_seconds_count",
    "vllm:inter_token_latency_seconds_count",
    "turbogate_emulator_kv_fragmentation",
]


def test_metric_names_and_model_label(fast_emulator: Service) -> None:
    values = scrape(fast_emulator.url)
    for name in NAMES:
        assert name in values, name
    import urllib.request

    with urllib.request.urlopen(fast_emulator.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert f'vllm:num_requests_running{{model_name="{MODEL}"}}' in text


def test_metrics_move_under_load(emulator_factory) -> None:  # type: ignore[no-untyped-def]
    # A tiny, slowed-down replica: 2 sequences at a time and 6 KV blocks (96 tokens), so eight
    # concurrent 60-token answers must queue, fill the cache and preempt.
    svc = emulator_factory("--model", MODEL, "--time-scale", "2", "--max-num-seqs", "2", "--num-gpu-blocks", "6")
    client = openai.OpenAI(base_url=svc.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    before = scrape(svc.url)
    n_requests = 8
    usage: list[int] = []

    def call(i: int) -> None:
        resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"load {i}"}],
                                              max_tokens=60, extra_body={"ignore_eos": True})
        assert resp.usage is not None
        usage.append(resp.usage.completion_tokens)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n_requests)]
    for t in threads:
        t.start()
    seen_running = seen_waiting = 0.0
    seen_kv = 0.0
    while any(t.is_alive() for t in threads):
        values = scrape(svc.url)
        seen_running = max(seen_running, values["vllm:num_requests_running"])
        seen_waiting = max(seen_waiting, values["vllm:num_requests_waiting"])
        seen_kv = max(seen_kv, values["vllm:kv_cache_usage_perc"])
        time.sleep(0.05)
    for t in threads:
        t.join()
    after = scrape(svc.url)

    assert usage == [60] * n_requests
    assert seen_running == 2, "max-num-seqs 2 caps the running batch"
    assert seen_waiting > 0, "requests beyond the batch wait"
    assert 0 < seen_kv <= 1.0
    assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
    assert after["vllm:kv_cache_usage_perc"] == 0
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 60 * n_requests
    assert after["vllm:prompt_tokens_total"] > before["vllm:prompt_tokens_total"]
    assert after["vllm:num_preemptions_total"] > 0, "two 72-token sequences overflow 6 blocks"
    for hist in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds"):
        assert after[f"vllm:{hist}_count"] == n_requests
    assert after["vllm:e2e_request_latency_seconds_sum"] >= after["vllm:time_to_first_token_seconds_sum"]
    # Every decode token observes its step (a first token, and one after a preemption's recompute, do not).
    itl_tokens = after["vllm:inter_token_latency_seconds_count"] - before["vllm:inter_token_latency_seconds_count"]
    assert 0 < itl_tokens <= 59 * n_requests
    assert after["vllm:inter_token_latency_seconds_sum"] > before["vllm:inter_token_latency_seconds_sum"]


def test_every_completion_request_is_counted_by_endpoint(fast_emulator: Service) -> None:
    """The upstream-call counter tests of a gateway rely on: every request received, good or bad."""
    client = openai.OpenAI(base_url=fast_emulator.url + "/v1", api_key="unused", max_retries=0)
    chat, plain = "turbogate_emulator_requests_total{endpoint=/v1/chat/completions}", \
        "turbogate_emulator_requests_total{endpoint=/v1/completions}"
    before = scrape(fast_emulator.url)
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "one"}], max_tokens=2)
    client.completions.create(model=MODEL, prompt="two", max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    after = scrape(fast_emulator.url)
    assert after[chat] - before.get(chat, 0.0) == 2
    assert after[plain] - before.get(plain, 0.0) == 1


DCGM_NAMES = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
              "DCGM_FI_PROF_DRAM_ACTIVE")


def _dcgm(url: str) -> dict[str, float]:
    """The DCGM gauges of GPU 0, by name."""
    return {k.split("{")[0]: v for k, v in scrape(url).items() if k.startswith("DCGM_") and "gpu=0" in k}


def test_dcgm_gauges_follow_the_phase_of_the_work(emulator_factory) -> None:  # type: ignore[no-untyped-def]
    """DCGM's names, one series per GPU with dcgm-exporter's labels; a long prompt keeps the tensor
    pipes busy and leaves HBM idle, long answers the other way round (engine/busy.py)."""
    svc = emulator_factory("--model", MODEL, "--gpu", "L4", "--tp", "2", "--time-scale", "0")
    import urllib.request

    with urllib.request.urlopen(svc.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for name in DCGM_NAMES:
        for gpu in ("0", "1"):
            assert f'{name}{{UUID="GPU-turbogate-emulator-{gpu}",device="nvidia{gpu}",gpu="{gpu}",modelName="L4"}}' \
                in text, (name, gpu)
    idle = _dcgm(svc.url)
    assert set(idle) == set(DCGM_NAMES) and all(v == 0.0 for v in idle.values())

    client = openai.OpenAI(base_url=svc.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    client.completions.create(model=MODEL, prompt="word " * 6000, max_tokens=1)
    prefill = _dcgm(svc.url)
    assert prefill["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] > 0.3 > prefill["DCGM_FI_PROF_DRAM_ACTIVE"]

    def answer(i: int) -> None:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"long {i}"}],
                                       max_tokens=300, extra_body={"ignore_eos": True})

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    decode = _dcgm(svc.url)
    assert decode["DCGM_FI_PROF_DRAM_ACTIVE"] > 0.5 > decode["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]
    for f in (prefill, decode):
        assert 0 < f["DCGM_FI_PROF_SM_ACTIVE"] <= f["DCGM_FI_DEV_GPU_UTIL"] / 100 <= 1.0
