"""vLLM V0's scheduling in the stepped engine: prefill-only steps without chunked prefill, and
multi-step runs of decodes (``EngineConfig.chunked_prefill``, ``num_scheduler_steps``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from turbogate.engine import Engine, EngineConfig, Request, StepResult
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.plan.replay import fixed, open_arrivals

DEP = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))


def steps_until(eng: Engine, now: float, stop: str) -> list[StepResult]:
    """Step until request ``stop`` has been scheduled for the first time."""
    out: list[StepResult] = []
    while not out or stop not in out[-1].scheduled_first:
        out.append(eng.step(now))
        now += out[-1].duration
        assert len(out) < 100
    return out


def test_without_chunked_prefill_a_prefill_step_holds_no_decodes() -> None:
    eng = Engine(DEP, EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096, chunked_prefill=False))
    eng.add_request(Request("a", 100, 50), 0.0)
    first = eng.step(0.0)
    assert (first.prefill_tokens, first.decode_seqs) == (100, 0)
    eng.step(first.end)  # a decodes
    eng.add_request(Request("b", 200, 50), 1.0)
    before = eng.output_tokens("a")
    prefill = eng.step(1.0)
    assert (prefill.prefill_tokens, prefill.decode_seqs, prefill.new_tokens) == (200, 0, 1)
    assert eng.output_tokens("a") == before  # the running decode waited a step
    assert prefill.duration == pytest.approx(DEP.prefill_time(200))
    both = eng.step(prefill.end)
    assert (both.prefill_tokens, both.decode_seqs) == (0, 2)


def test_with_chunked_prefill_the_same_arrival_rides_along_with_the_decode() -> None:
    eng = Engine(DEP, EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096))
    eng.add_request(Request("a", 100, 50), 0.0)
    eng.step(eng.step(0.0).end)
    eng.add_request(Request("b", 200, 50), 1.0)
    mixed = eng.step(1.0)
    assert (mixed.prefill_tokens, mixed.decode_seqs) == (200, 1)


@pytest.mark.parametrize("k", [1, 4, 10])
def test_a_multi_step_run_admits_nothing_until_it_ends(k: int) -> None:
    eng = Engine(DEP, EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096, chunked_prefill=False,
                                   num_scheduler_steps=k))
    eng.add_request(Request("a", 100, 500), 0.0)
    eng.step(0.0)  # a's prefill
    run_start = eng.step(1.0)  # a decode-only step starts a run of k
    assert run_start.decode_seqs == 1
    eng.add_request(Request("b", 100, 50), run_start.end)
    waited = steps_until(eng, run_start.end, "b")
    # The run's k − 1 remaining decode steps go first; then b's prefill step.
    assert [s.decode_seqs for s in waited] == [1] * (k - 1) + [0]


def test_a_run_ends_early_when_its_decodes_are_done() -> None:
    eng = Engine(DEP, EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096, chunked_prefill=False,
                                   num_scheduler_steps=10))
    eng.add_request(Request("a", 100, 3), 0.0)
    eng.step(0.0)
    eng.step(1.0)
    eng.step(2.0)  # a's last token: the run has no decodes left
    assert not eng.has_work()
    eng.add_request(Request("b", 100, 2), 3.0)
    assert eng.step(3.0).prefill_tokens == 100


def test_output_lag_delays_the_first_token_by_one_step_under_multi_step() -> None:
    config = EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096, chunked_prefill=False, num_scheduler_steps=4)
    plain = open_arrivals(DEP, config, 1, fixed(100, 20))
    lagged = open_arrivals(DEP, replace(config, output_lag_steps=1), 1, fixed(100, 20))
    step = DEP.decode_step_time(1, 100)  # the prompt is cached; the first token is not yet
    assert lagged.ttft() == pytest.approx(plain.ttft() + step, rel=1e-6)
    assert lagged.e2e() == pytest.approx(plain.e2e())


def test_config_rejects_zero_scheduler_steps() -> None:
    with pytest.raises(ValueError, match="num_scheduler_steps"):
        EngineConfig(num_scheduler_steps=0)


def test_the_engine_applies_the_output_lag_under_load() -> None:
    """``EngineConfig.output_lag_steps``: the engine reports a first token that many steps later, so every
    driver (replay, sim, emulator) sees it then; the finishes do not move."""
    base = EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096, chunked_prefill=False, num_scheduler_steps=4)
    lengths = fixed(100, 20)
    by_engine = open_arrivals(DEP, replace(base, output_lag_steps=1), 5, lengths, rate=20.0)
    plain = open_arrivals(DEP, base, 5, lengths, rate=20.0)
    assert by_engine.ttft("mean") > plain.ttft("mean")
    assert by_engine.e2e("mean") == pytest.approx(plain.e2e("mean"))


def test_a_held_first_token_is_out_a_step_later_or_with_its_finish() -> None:
    eng = Engine(DEP, EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096, output_lag_steps=1))
    eng.add_request(Request("a", 100, 5), 0.0)
    eng.add_request(Request("one", 50, 1), 0.0)  # its only token is its last: out with its finish
    first = eng.step(0.0)
    assert first.first_token == ["one"] and [f.request_id for f in first.finished] == ["one"]
    assert eng.output_tokens("a") == 0  # sampled, not yet seen by the client
    second = eng.step(first.end)
    assert second.first_token == ["a"] and eng.output_tokens("a") == 2
    assert eng.step(second.end).first_token == []


def test_an_aborted_request_never_reports_its_held_first_token() -> None:
    eng = Engine(DEP, EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096, output_lag_steps=2))
    eng.add_request(Request("a", 100, 9), 0.0)
    eng.add_request(Request("b", 100, 9), 0.0)
    now = eng.step(0.0).end
    assert eng.abort("a")
    seen: list[str] = []
    for _ in range(3):
        step = eng.step(now)
        now = step.end
        seen += step.first_token
    assert seen == ["b"]


def test_config_rejects_a_negative_output_lag() -> None:
    with pytest.raises(ValueError, match="output_lag_steps"):
        EngineConfig(output_lag_steps=-1)
