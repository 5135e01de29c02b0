"""TensorRT-LLM's admission in the stepped engine (``reserve_whole``: every request counted at its final
length at once, never evicted) and the busy engine's first-token wait (``PerfFactors.busy_ttft_steps``)
in the replay and in both closed forms."""

from __future__ import annotations

from dataclasses import replace

from turbogate.engine import Engine, EngineConfig, Request
from turbogate.engine.profiled import profile_config
from turbogate.engine.reserve import Reservation
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.perf.cells import published_cells
from turbogate.perf.profiles import get_profile
from turbogate.plan.fidelity import closed_form
from turbogate.plan.latency import latency_model
from turbogate.plan.replay import closed_loop, fixed

DEP = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
FINAL = 100 + 400 + 15  # prompt + output, counted up to its last 16-token block


def most_running(blocks: int) -> tuple[int, int]:
    """(most requests decoding at once, preemptions) when three join a nearly finished one in a pool of
    ``blocks`` 16-token blocks, under TensorRT-LLM's admission."""
    eng = Engine(DEP, profile_config("trtllm", num_gpu_blocks=blocks))
    eng.add_request(Request("first", 100, 400), 0.0)
    now = 0.0
    for _ in range(351):
        now = eng.step(now).end
    for i in range(3):
        eng.add_request(Request(f"late{i}", 100, 400), now)
    most = 0
    while eng.has_work():
        step = eng.step(now)
        now = step.end
        most = max(most, step.decode_seqs)
    return most, eng.stats().num_preemptions


def test_tensorrt_llm_admits_while_every_request_at_its_final_length_fits_and_never_preempts() -> None:
    assert get_profile("trtllm").reserve_whole and profile_config("trtllm").reserve_whole
    for blocks in (60, 100, 130):  # 1, 3 and 4 requests of 515 tokens at once
        most, preempted = most_running(blocks)
        assert (most, preempted) == (min(4, blocks * 16 // FINAL), 0), blocks
    pool = Reservation(10, 16, whole=True)  # 160 tokens: the candidates' final lengths, summed
    assert pool.fits([(0, 80), (0, 80)]) and not pool.fits([(0, 80), (1, 80)])


def test_a_busy_engine_holds_a_first_token_for_its_steps_and_an_idle_one_does_not() -> None:
    busy = replace(DEP, factors=replace(DEP.factors, busy_ttft_steps=4.0))
    cfg = EngineConfig()
    for c in (1, 4):
        base, held = (closed_loop(d, cfg, c, 40, fixed(200, 100)).steady(c) for d in (DEP, busy))
        extra = held.ttft("mean") - base.ttft("mean")
        if c == 1:
            assert extra == 0.0
        else:
            assert 3.0 * base.tpot("mean") < extra < 5.0 * held.tpot("mean")
    idle, loaded = latency_model(DEP, 200, 100), latency_model(busy, 200, 100)
    for rate in (1.0, 20.0):
        n = loaded.batch(rate)
        assert abs(loaded.ttft(rate) - idle.ttft(rate) - min(1.0, n) * 4.0 * loaded.tpot(rate)) < 1e-9


def test_the_closed_form_queues_the_clients_the_kv_cache_cannot_hold() -> None:
    """NIM 500/2000: 150 clients fit the KV cache (published TTFT 0.3 s), 200 do not (4.9 s)."""
    cells = {c.id: c for c in published_cells()}
    trtllm = get_profile("trtllm")
    fits = closed_form(cells["nim18-70b-h100tp2-500-2000-c150-ttft"], trtllm).predicted
    queued = closed_form(cells["nim18-70b-h100tp2-500-2000-c200-ttft"], trtllm).predicted
    assert fits < 1000.0 < queued
