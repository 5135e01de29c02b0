"""SGLang's scheduling in the stepped engine: prefill-first batches of waiting requests, admitted only
while every running request's output still fits the KV cache (``EngineConfig.reserve_outputs``), and
vLLM's chunked-prefill mix left as it was."""

from __future__ import annotations

import random
from dataclasses import replace

from turbogate.engine import Engine, Request
from turbogate.engine.profiled import profile_config
from turbogate.engine.reserve import Reservation
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.perf.profiles import ENGINE_PROFILES
from turbogate.plan.replay import fixed, open_arrivals

DEP = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
SGLANG = profile_config("sglang")


def sglang_rule(states: list[tuple[int, int]], free: int) -> bool:
    """SGLang's check written out as it reads: (tokens left, tokens held) sorted by tokens left, ``free``
    tokens beyond what they hold; at each turn the unfinished grow for the next one's tokens left."""
    states = sorted(states)
    freed = 0
    for i, (left, hold) in enumerate(states):
        steps = states[i + 1][0] if i + 1 < len(states) else left
        if free + freed - steps * (len(states) - i) <= 0:
            return False
        freed += hold
    return True


def test_the_sglang_profile_admits_a_batch_of_waiting_prefills_in_one_step_without_decodes() -> None:
    eng = Engine(DEP, SGLANG)
    eng.add_request(Request("run", 100, 500), 0.0)
    eng.step(eng.step(0.0).end)  # its prefill, then a decode
    for i in range(5):
        eng.add_request(Request(f"w{i}", 300 + i, 50), 1.0)
    before = eng.output_tokens("run")
    step = eng.step(1.0)
    assert sorted(step.scheduled_first) == [f"w{i}" for i in range(5)]
    assert (step.prefill_tokens, step.decode_seqs) == (sum(300 + i for i in range(5)), 0)
    assert eng.output_tokens("run") == before, "the running decode waits out the prefill batch"
    after = eng.step(step.end)
    assert (after.prefill_tokens, after.decode_seqs) == (0, 6)


def test_the_batch_stops_at_the_chunk_and_the_cut_prompt_goes_first_next_time() -> None:
    eng = Engine(DEP, replace(SGLANG, max_num_seqs=64, max_num_batched_tokens=1000))
    for i, prompt in enumerate((400, 800, 300)):
        eng.add_request(Request(f"r{i}", prompt, 20), 0.0)
    first = eng.step(0.0)
    assert (first.prefill_tokens, sorted(first.scheduled_first)) == (1000, ["r0", "r1"])
    second = eng.step(first.end)  # r1's last 200 tokens, then r2
    assert (second.prefill_tokens, second.scheduled_first, second.decode_seqs) == (500, ["r2"], 0)


def test_admission_reserves_the_outputs_so_nothing_is_ever_preempted() -> None:
    blocks = 200  # 3,200 tokens: room for a few requests' whole outputs, far fewer than arrive
    plain = open_arrivals(DEP, replace(SGLANG, reserve_outputs=False, num_gpu_blocks=blocks), 40, fixed(300, 600))
    reserved = open_arrivals(DEP, replace(SGLANG, num_gpu_blocks=blocks), 40, fixed(300, 600))
    assert plain.preemptions > 0, "without the reservation the same load runs out of KV"
    assert reserved.preemptions == 0
    assert len(reserved.timings) == 40


def test_a_full_pool_admits_nobody_until_a_request_leaves() -> None:
    eng = Engine(DEP, replace(SGLANG, num_gpu_blocks=120))  # 1,920 tokens
    eng.add_request(Request("a", 200, 600), 0.0)
    eng.add_request(Request("b", 200, 600), 0.0)
    eng.add_request(Request("c", 200, 600), 0.0)
    first = eng.step(0.0)
    assert sorted(first.scheduled_first) == ["a", "b"], "a third 800-token request cannot be reserved"
    now = first.end
    while "a" in eng:
        step = eng.step(now)
        now = step.end
        assert not step.scheduled_first or step.finished
    step = eng.step(now)
    assert step.scheduled_first == ["c"] and step.decode_seqs == 0


def test_the_check_is_sglangs_rule_at_any_decode_clock() -> None:
    rng = random.Random(7)
    for _ in range(300):
        capacity = rng.randint(100, 5000)
        reserve = Reservation(capacity, 1)  # one-token pages: no rounding, as SGLang's
        states = [(rng.randint(1, 400), rng.randint(1, 400)) for _ in range(rng.randint(1, 12))]
        clock = rng.randint(0, 1000)
        others = [(clock + left, hold - clock) for left, hold in states]
        assert reserve.fits(others) == sglang_rule(states, capacity - sum(h for _, h in states))


def test_vllms_chunked_prefill_mix_is_unchanged() -> None:
    for name, profile in ENGINE_PROFILES.items():
        assert profile.reserve_outputs == (name in ("sglang", "trtllm"))  # TensorRT-LLM's: test_trtllm.py
    eng = Engine(DEP, profile_config("vllm-v1"))
    eng.add_request(Request("a", 100, 50), 0.0)
    eng.step(eng.step(0.0).end)
    for i in range(3):
        eng.add_request(Request(f"b{i}", 200, 50), 1.0)
    mixed = eng.step(1.0)
    assert (mixed.prefill_tokens, mixed.decode_seqs) == (600, 1)
    # the reservation is off, so the same engine with the flag spelled out steps identically
    runs = [open_arrivals(DEP, cfg, 60, fixed(500, 200), rate=20.0)
            for cfg in (profile_config("vllm-v1"), replace(profile_config("vllm-v1"), reserve_outputs=False))]
    assert runs[0] == runs[1]
