"""Unit tests of the stepped engine: chunked prefill, decode, preemption, policies, aborts."""

from __future__ import annotations

import pytest

from turbogate.engine import Engine, EngineConfig, Finished, Request, RequestTooLarge, StepResult
from turbogate.perf import deployment, get_gpu, get_model

DEP = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))


def engine(**config: object) -> Engine:
    return Engine(DEP, EngineConfig(**config))  # type: ignore[arg-type]


def run_to_end(eng: Engine, limit: int = 100_000) -> list[StepResult]:
    results = []
    now = 0.0
    while eng.has_work():
        result = eng.step(now)
        now += result.duration
        results.append(result)
        assert len(results) < limit, "engine did not finish"
    return results


def test_chunked_prefill_splits_a_long_prompt_under_the_token_budget() -> None:
    # max_num_seqs must not exceed the token budget (vLLM's rule), hence the small batch.
    eng = engine(max_num_batched_tokens=100, max_num_seqs=8)
    eng.add_request(Request("a", 250, 3), 0.0)
    steps = run_to_end(eng)
    assert [s.prefill_tokens for s in steps] == [100, 100, 50, 0, 0]
    assert [s.decode_seqs for s in steps] == [0, 0, 0, 1, 1]
    # The first output token is sampled in the step that completes the prefill.
    assert [i for i, s in enumerate(steps) if s.first_token] == [2]
    assert [s.new_tokens for s in steps] == [0, 0, 1, 1, 1]
    assert steps[-1].finished == [Finished("a", 3, "length")]


def test_output_tokens_reports_progress_between_steps() -> None:
    eng = engine()
    eng.add_request(Request("a", 20, 4, finish_reason="stop"), 0.0)
    assert eng.output_tokens("a") == 0
    seen = []
    while "a" in eng:
        result = eng.step(0.0)
        seen.append(eng.output_tokens("a") if "a" in eng else result.finished[0].output_tokens)
    assert seen == [1, 2, 3, 4]
    assert result.finished == [Finished("a", 4, "stop")]
    with pytest.raises(KeyError):
        eng.output_tokens("a")


def test_a_step_takes_effect_at_finish_step() -> None:
    eng = engine()
    eng.add_request(Request("a", 20, 5), 0.0)
    eng.step(0.0)
    duration = eng.schedule(1.0)
    assert duration == pytest.approx(DEP.step_time(0, 1, 20, 0))
    assert eng.output_tokens("a") == 1, "the step in flight has not produced its token yet"
    with pytest.raises(RuntimeError):
        eng.schedule(1.0)
    result = eng.finish_step()
    assert (result.start, result.duration, result.end) == (1.0, duration, 1.0 + duration)
    assert eng.output_tokens("a") == 2
    with pytest.raises(RuntimeError):
        eng.finish_step()


def test_abort_while_a_step_is_in_flight_drops_its_tokens() -> None:
    eng = engine()
    eng.add_request(Request("dec", 20, 50), 0.0)
    eng.step(0.0)
    eng.add_request(Request("pre", 300, 50), 0.0)
    eng.schedule(0.0)
    assert eng.abort("dec") and eng.abort("pre")
    result = eng.finish_step()
    assert result.first_token == [] and result.finished == [] and result.new_tokens == 0
    assert eng.stats().kv_blocks_used == 0 and not eng.has_work()


def test_batched_tokens_below_max_num_seqs_is_refused() -> None:
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        EngineConfig(max_num_seqs=256, max_num_batched_tokens=128)


def test_decode_and_prefill_share_a_step() -> None:
    eng = engine(max_num_batched_tokens=64, max_num_seqs=8)
    eng.add_request(Request("a", 10, 5), 0.0)
    first = eng.step(0.0)
    assert first.prefill_tokens == 10 and first.scheduled_first == ["a"]
    eng.add_request(Request("b", 200, 2), 0.0)
    second = eng.step(1.0)
    # "a" decodes one token, "b" gets the rest of the budget as a prefill chunk.
    assert second.decode_seqs == 1 and second.prefill_tokens == 63
    assert second.scheduled_first == ["b"]
    assert second.duration == pytest.approx(DEP.step_time(63, 1, 10, 0, prefill_seqs=1))


def test_prefill_chunks_of_several_requests_are_timed_per_request() -> None:
    eng = engine()
    eng.add_request(Request("a", 300, 2), 0.0)
    eng.add_request(Request("b", 500, 2), 0.0)
    step = eng.step(0.0)
    assert step.prefill_tokens == 800
    assert step.duration == pytest.approx(DEP.step_time(800, 0, 0, 0, prefill_seqs=2))


def test_step_duration_comes_from_the_perf_model() -> None:
    eng = engine()
    eng.add_request(Request("a", 100, 3), 0.0)
    prefill = eng.step(0.0)
    assert prefill.duration == pytest.approx(DEP.step_time(100, 0, 0, 0, prefill_seqs=1))
    decode = eng.step(prefill.duration)
    assert decode.duration == pytest.approx(DEP.step_time(0, 1, 100, 0))


def test_max_num_seqs_caps_the_running_batch() -> None:
    eng = engine(max_num_seqs=3)
    for i in range(10):
        eng.add_request(Request(str(i), 20, 4), 0.0)
    eng.step(0.0)
    stats = eng.stats()
    assert stats.running == 3 and stats.waiting == 7
    run_to_end(eng)
    assert eng.stats().finished == 10


def test_preemption_by_recompute_when_blocks_run_out() -> None:
    # 4 blocks of 16 tokens = 64 tokens of KV; two requests that each grow to 40 tokens.
    eng = engine(num_gpu_blocks=4)
    eng.add_request(Request("old", 16, 25), 0.0)
    eng.add_request(Request("new", 16, 25), 1.0)
    steps = run_to_end(eng)
    preempted = [rid for s in steps for rid in s.preempted]
    assert preempted and set(preempted) == {"new"}, "FCFS preempts the latest request"
    stats = eng.stats()
    assert stats.num_preemptions == len(preempted)
    assert stats.finished == 2 and stats.kv_blocks_used == 0
    finished = {f.request_id: f.output_tokens for s in steps for f in s.finished}
    assert finished == {"old": 25, "new": 25}, "no token lost or repeated across a preemption"
    assert sum(s.new_tokens for s in steps) == 50
    assert [rid for s in steps for rid in s.first_token] == ["old", "new"]


def _preempt_new(old_output: int, new_output: int) -> tuple[Engine, int]:
    """4 blocks; "new" (16 prompt tokens) is preempted once "old" needs a block: returns its output then."""
    eng = engine(num_gpu_blocks=4)
    eng.add_request(Request("old", 16, old_output), 0.0)
    eng.add_request(Request("new", 16, new_output), 1.0)
    produced = 0
    while True:
        result = eng.step(0.0)
        if result.preempted:
            assert result.preempted == ["new"]
            assert eng.output_tokens("new") == produced, "a preempted request keeps its tokens"
            break
        produced = eng.output_tokens("new")
    assert produced > 0 and eng.stats().waiting == 1
    return eng, produced


def test_preempted_request_recomputes_prompt_plus_output_once_its_blocks_are_reused() -> None:
    # "new" held 2 full blocks (32 tokens); "old" runs to 56 tokens and takes both of them back
    # from the free queue before "new" is rescheduled: no prefix left, all 16 + 17 recomputed.
    eng, produced = _preempt_new(40, 30)
    recompute = next(s for s in iter(lambda: eng.step(0.0), None) if s.prefill_tokens > 0)
    assert recompute.prefill_tokens == 16 + produced == 33
    assert recompute.first_token == [], "not a first token: it had produced some before"


def test_preempted_request_finds_its_untouched_prefix_in_the_cache() -> None:
    # As in vLLM: freed blocks go to the back of the free queue, last block first.  "old" (41 tokens)
    # takes one more block, "new"'s second; its first (tokens 0-15) still holds its KV when "new"
    # is rescheduled, so only 33 - 16 tokens are computed again.
    eng, produced = _preempt_new(25, 25)
    recompute = next(s for s in iter(lambda: eng.step(0.0), None) if s.prefill_tokens > 0)
    assert recompute.prefill_tokens == 16 + produced - 16 == 17
    assert eng.stats().finished == 1 and eng.output_tokens("new") == produced + 1


def test_priority_policy_preempts_the_highest_priority_value() -> None:
    eng = engine(num_gpu_blocks=4, policy="priority")
    eng.add_request(Request("background", 16, 25, priority=5), 0.0)
    eng.add_request(Request("urgent", 16, 25, priority=0), 1.0)
    steps = run_to_end(eng)
    preempted = {rid for s in steps for rid in s.preempted}
    assert preempted == {"background"}
    finish_order = [f.request_id for s in steps for f in s.finished]
    assert finish_order == ["urgent", "background"]


def test_priority_policy_admits_lower_values_first() -> None:
    eng = engine(max_num_seqs=1, policy="priority")
    eng.add_request(Request("p5", 10, 1, priority=5), 0.0)
    eng.add_request(Request("p1-late", 10, 1, priority=1), 2.0)
    eng.add_request(Request("p1-early", 10, 1, priority=1), 1.0)
    eng.add_request(Request("p0", 10, 1, priority=0), 3.0)
    order = [rid for s in run_to_end(eng) for rid in s.scheduled_first]
    assert order == ["p0", "p1-early", "p1-late", "p5"]


def test_fcfs_admits_in_arrival_order_whatever_the_priority() -> None:
    eng = engine(max_num_seqs=1)
    for i, prio in enumerate([0, 0, 0]):
        eng.add_request(Request(f"r{i}", 10, 2, priority=prio), float(i))
    order = [rid for s in run_to_end(eng) for rid in s.scheduled_first]
    assert order == ["r0", "r1", "r2"]


def test_abort_frees_blocks_and_drops_the_request() -> None:
    eng = engine()
    eng.add_request(Request("a", 100, 50), 0.0)
    eng.add_request(Request("b", 100, 50), 0.0)
    eng.step(0.0)
    assert eng.stats().kv_blocks_used > 0
    assert eng.abort("a")
    assert not eng.abort("a")
    assert "a" not in eng
    steps = run_to_end(eng)
    assert [f.request_id for s in steps for f in s.finished] == ["b"]
    assert eng.stats().kv_blocks_used == 0


def test_abort_while_waiting() -> None:
    eng = engine(max_num_seqs=1)
    eng.add_request(Request("a", 10, 3), 0.0)
    eng.add_request(Request("b", 10, 3), 0.0)
    eng.step(0.0)
    assert eng.stats().waiting == 1
    assert eng.abort("b")
    assert eng.stats().waiting == 0
    steps = run_to_end(eng)
    assert [f.request_id for s in steps for f in s.finished] == ["a"]


def test_request_that_can_never_fit_is_refused() -> None:
    eng = engine(num_gpu_blocks=2)  # 32 tokens
    with pytest.raises(RequestTooLarge):
        eng.add_request(Request("big", 30, 4), 0.0)
    eng.add_request(Request("fits", 30, 3), 0.0)  # 32 tokens of KV: the last sampled token is never cached
    run_to_end(eng)
    assert eng.stats().finished == 1


def test_counters_count_prompt_once_and_every_generated_token() -> None:
    eng = engine(num_gpu_blocks=4)
    eng.add_request(Request("a", 16, 25), 0.0)
    eng.add_request(Request("b", 16, 25), 0.0)
    run_to_end(eng)
    stats = eng.stats()
    assert stats.prompt_tokens == 32
    assert stats.generation_tokens == 50
    assert stats.num_preemptions > 0


def test_duplicate_ids_rejected() -> None:
    eng = engine()
    eng.add_request(Request("a", 10, 1), 0.0)
    with pytest.raises(ValueError):
        eng.add_request(Request("a", 10, 1), 0.0)


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_many_aborted_waiting_requests_are_compacted_away_in_order(policy: str) -> None:
    eng = engine(max_num_seqs=1, policy=policy)
    eng.add_request(Request("busy", 10, 5), 0.0)
    for i in range(300):
        eng.add_request(Request(f"w{i}", 10, 1, priority=i % 3 if policy == "priority" else 0), float(i))
    eng.step(0.0)
    for i in range(300):
        if i % 3:
            assert eng.abort(f"w{i}")
    assert eng.num_waiting == 100
    queue = eng._waiting
    assert len(queue._heap) + len(queue._fifo) < 300, "dead entries do not pile up"
    order = [rid for s in run_to_end(eng) for rid in s.scheduled_first]
    assert order == [f"w{i}" for i in range(0, 300, 3)]


def test_long_prompts_under_kv_pressure_do_not_thrash() -> None:
    # 12 requests of 900 + 200 tokens on 2,048 tokens of KV: preemptions happen, but a preempted
    # request gets back the prefix the free queue has not handed out again, so the engine computes
    # little more than the prompts once (without that: ~9.6x the prompts, 118 preemptions).
    eng = engine(max_num_seqs=16, max_num_batched_tokens=256, num_gpu_blocks=128)
    for i in range(12):
        eng.add_request(Request(str(i), 900, 200), 0.0)
    steps = run_to_end(eng)
    assert eng.stats().num_preemptions > 0
    assert eng.stats().finished == 12
    assert sum(s.prefill_tokens for s in steps) <= 1.25 * 12 * 900
