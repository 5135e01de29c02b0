"""EngineLoop: the engine's loop in virtual time (steps back to back while there is work)."""

from __future__ import annotations

import heapq

import pytest

from turbogate.engine import Engine, EngineConfig, EngineLoop, Request, RequestTooLarge, StepResult
from turbogate.perf import deployment, get_gpu, get_model

DEP = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))


def new_loop(**config: object) -> EngineLoop:
    return EngineLoop(Engine(DEP, EngineConfig(**config)))  # type: ignore[arg-type]


def test_idle_engine_starts_a_step_at_submit() -> None:
    loop = new_loop()
    assert loop.next_time() is None
    loop.submit(Request("a", 100, 3), 5.0)
    assert loop.next_time() == pytest.approx(5.0 + DEP.step_time(100, 0, 0, 0, prefill_seqs=1))


def test_steps_run_back_to_back_until_the_work_is_done() -> None:
    loop = new_loop()
    loop.submit(Request("a", 100, 3), 1.0)
    results: list[StepResult] = []
    while (t := loop.next_time()) is not None:
        results.append(loop.advance(t))
    assert [r.start for r in results[1:]] == [r.end for r in results[:-1]]
    assert results[0].start == 1.0 and results[0].first_token == ["a"]
    assert [f.request_id for f in results[-1].finished] == ["a"] and len(results) == 3
    assert not loop.engine.has_work()


def test_a_request_submitted_mid_step_joins_the_next_step() -> None:
    loop = new_loop()
    loop.submit(Request("a", 100, 5), 0.0)
    end = loop.next_time()
    assert end is not None
    loop.submit(Request("b", 50, 5), end / 2)
    assert loop.next_time() == end, "a busy engine does not restart its step"
    first = loop.advance(end)
    assert first.scheduled_first == ["a"]
    second_end = loop.next_time()
    assert second_end is not None
    second = loop.advance(second_end)
    assert second.scheduled_first == ["b"] and second.decode_seqs == 1 and second.prefill_tokens == 50


def test_advance_checks_its_time() -> None:
    loop = new_loop()
    with pytest.raises(RuntimeError):
        loop.advance(0.0)
    loop.submit(Request("a", 100, 2), 0.0)
    end = loop.next_time()
    assert end is not None
    with pytest.raises(ValueError):
        loop.advance(end / 2)
    later = end + 1.0  # a driver may come late: the next step starts when it does
    loop.advance(later)
    assert loop.next_time() == pytest.approx(later + DEP.step_time(0, 1, 100, 0))


def test_abort_mid_step_keeps_the_step_and_then_idles() -> None:
    loop = new_loop()
    loop.submit(Request("a", 100, 50), 0.0)
    end = loop.next_time()
    assert loop.abort("a", 0.001) and not loop.abort("a", 0.001)
    assert loop.next_time() == end, "work already launched ends when it ends"
    assert end is not None
    result = loop.advance(end)
    assert result.first_token == [] and result.finished == []
    assert loop.next_time() is None and loop.engine.stats().kv_blocks_used == 0


def test_too_large_request_is_refused_and_leaves_the_loop_idle() -> None:
    loop = new_loop(num_gpu_blocks=2)
    with pytest.raises(RequestTooLarge):
        loop.submit(Request("big", 30, 10), 0.0)
    assert loop.next_time() is None


def test_a_small_event_driven_run_finishes_every_request_with_its_latency() -> None:
    """The way a simulator drives it: arrivals and step ends on one event heap."""
    loop = new_loop(max_num_seqs=4)
    arrivals = [(0.01 * i, Request(f"r{i}", 200 + 10 * i, 20 + i)) for i in range(12)]
    events = [(t, i) for i, (t, _) in enumerate(arrivals)]
    heapq.heapify(events)
    first_token: dict[str, float] = {}
    finished: dict[str, tuple[float, int]] = {}
    now = 0.0
    while events or loop.next_time() is not None:
        step_end = loop.next_time()
        if events and (step_end is None or events[0][0] < step_end):
            now, i = heapq.heappop(events)
            loop.submit(arrivals[i][1], now)
            continue
        assert step_end is not None and step_end >= now
        now = step_end
        result = loop.advance(now)
        for rid in result.first_token:
            first_token[rid] = result.end
        for done in result.finished:
            finished[done.request_id] = (result.end, done.output_tokens)
    for t, req in arrivals:
        rid = req.request_id
        assert t < first_token[rid] < finished[rid][0]
        assert finished[rid][1] == req.output_tokens
    assert loop.engine.stats().busy_time <= now
