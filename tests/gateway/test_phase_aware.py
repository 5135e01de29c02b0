"""Phase-aware replica choice through the real shell: two emulators (real processes), one kept
busy prefilling long prompts and one decoding long answers by clients of their own; the gateway
scrapes their DCGM gauges (``/admin/state`` shows them) and, with ``bands.phase_weight`` on, sends
a long prompt to the decoding replica and a long answer to the prefilling one."""

from __future__ import annotations

import contextlib
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import KEY, MODEL, gateway_config, pool, replica_state, wait_for
from turbogate.procs import Service


def _chat_calls(url: str) -> float:
    """Chat requests an emulator received: the gateway's (the clients of their own use /v1/completions)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "turbogate_emulator_requests_total" and s.labels.get("endpoint") == "/v1/chat/completions")


def test_long_prompts_go_where_compute_is_free_and_long_answers_where_bandwidth_is(
        emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    prefilling = emulator_factory("--model", MODEL, "--gpu", "L4", "--time-scale", "1")
    decoding = emulator_factory("--model", MODEL, "--gpu", "L4", "--time-scale", "1")
    cfg = gateway_config([pool("p", [MODEL], [prefilling.url, decoding.url])], bands={"phase_weight": 4.0})
    gw = gateway_factory(cfg)
    stop = threading.Event()

    def keep_prefilling() -> None:  # long prompts, one token each, back to back
        direct = openai.OpenAI(base_url=prefilling.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        with contextlib.suppress(openai.APIError):  # the emulator stopping at the end
            while not stop.is_set():
                direct.completions.create(model=MODEL, prompt="word " * 6000, max_tokens=1)

    def keep_decoding() -> None:  # short prompts, long answers
        direct = openai.OpenAI(base_url=decoding.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        with contextlib.suppress(openai.APIError):
            while not stop.is_set():
                direct.completions.create(model=MODEL, prompt="hi", max_tokens=300, extra_body={"ignore_eos": True})

    workers = [threading.Thread(target=keep_prefilling, daemon=True)]
    workers += [threading.Thread(target=keep_decoding, daemon=True) for _ in range(12)]
    for w in workers:
        w.start()
    try:
        def phases_apart() -> bool:
            p, d = replica_state(gw.url, prefilling.url), replica_state(gw.url, decoding.url)
            if None in (p["tensor_active"], p["dram_active"], d["tensor_active"], d["dram_active"]):
                return False
            return bool(p["tensor_active"] > d["tensor_active"] + 0.1 and d["dram_active"] > p["dram_active"] + 0.1)

        wait_for(phases_apart, timeout=60.0, what="the prefilling replica's tensor and the decoding one's DRAM "
                 "shares to stand apart in /admin/state")
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
        before = {u: _chat_calls(u) for u in (prefilling.url, decoding.url)}
        for _ in range(3):  # one at a time: the gateway's own in-flight counts stay equal (none)
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 800}],
                                           max_tokens=1)
        after_prompts = {u: _chat_calls(u) for u in (prefilling.url, decoding.url)}
        for _ in range(3):  # its first token is enough: the choice was made at dispatch (a decode on a
            # replica busy prefilling waits for each long step: its TPOT is the price of the rule)
            with client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=2000, stream=True) as answer:
                next(iter(answer))
        after_answers = {u: _chat_calls(u) for u in (prefilling.url, decoding.url)}
    finally:
        stop.set()
    assert after_prompts[decoding.url] - before[decoding.url] == 3, "long prompts go where the tensor pipes idle"
    assert after_prompts[prefilling.url] == before[prefilling.url]
    assert after_answers[prefilling.url] - after_prompts[prefilling.url] == 3, "long answers go where HBM idles"
    assert after_answers[decoding.url] == after_prompts[decoding.url]
