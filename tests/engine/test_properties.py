"""Hypothesis properties of the engine over random workloads, configs and aborts."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from turbogate.engine import Engine, EngineConfig, Request
from turbogate.perf import deployment, get_gpu, get_model

DEP = deployment(get_gpu("A100-80G-SXM"), get_model("llama-3.2-1b"))


@dataclass
class Spec:
    arrive_step: int
    prompt: int
    output: int
    priority: int
    abort_step: int | None


specs = st.builds(
    Spec,
    arrive_step=st.integers(0, 30),
    prompt=st.integers(1, 120),
    output=st.integers(1, 60),
    priority=st.integers(0, 3),
    abort_step=st.none() | st.integers(0, 80),
)


@settings(max_examples=150, deadline=None)
@given(
    workload=st.lists(specs, min_size=1, max_size=25),
    blocks=st.integers(12, 40),
    max_seqs=st.integers(1, 8),
    budget=st.integers(8, 256),
    policy=st.sampled_from(["fcfs", "priority"]),
)
def test_engine_invariants(workload: list[Spec], blocks: int, max_seqs: int, budget: int, policy: str) -> None:
    eng = Engine(DEP, EngineConfig(max_num_seqs=max_seqs, max_num_batched_tokens=budget, policy=policy,  # type: ignore[arg-type]
                                   num_gpu_blocks=blocks))
    capacity = blocks * 16
    # Every request fits the KV cache alone (the engine refuses the others; tested elsewhere).
    for spec in workload:
        spec.output = max(1, min(spec.output, capacity - spec.prompt + 1))
    by_id = {f"r{i}": spec for i, spec in enumerate(workload)}
    produced: dict[str, int] = dict.fromkeys(by_id, 0)
    first_tokens: dict[str, int] = dict.fromkeys(by_id, 0)
    finished: set[str] = set()
    aborted: set[str] = set()
    added: list[str] = []
    started: list[str] = []
    preempted_ever: set[str] = set()
    step = 0
    now = 0.0
    while True:
        for rid, spec in by_id.items():
            if spec.arrive_step == step:
                eng.add_request(Request(rid, spec.prompt, spec.output, spec.priority), now)
                added.append(rid)
            if spec.abort_step == step and rid in eng:
                assert eng.abort(rid)
                aborted.add(rid)
        if step > max(s.arrive_step for s in workload) and not eng.has_work():
            break
        result = eng.step(now)
        now += result.duration
        step += 1
        assert step < 20_000, "engine stalled"

        # KV blocks are never over-committed and never leak.
        stats = eng.stats()
        assert 0 <= stats.kv_blocks_used <= stats.kv_blocks_total
        assert eng.held_blocks() == stats.kv_blocks_used
        assert 0.0 <= stats.kv_usage <= 1.0 and 0.0 <= stats.fragmentation < 1.0
        assert stats.running <= max_seqs
        assert result.prefill_tokens + result.decode_seqs <= budget
        assert result.duration >= 0.0

        preempted_ever.update(result.preempted)
        for rid in result.scheduled_first:
            # Priority policy serves lower values first: nothing that ranks ahead is still unstarted.
            if policy == "priority":
                mine = (by_id[rid].priority, by_id[rid].arrive_step)
                for other in added:
                    if other in started or other in aborted or other == rid:
                        continue
                    theirs = (by_id[other].priority, by_id[other].arrive_step)
                    assert not theirs < mine, f"{other} {theirs} waited while {rid} {mine} started"
            started.append(rid)
        for event in result.events:
            assert event.request_id not in finished
            produced[event.request_id] += event.new_tokens
            assert produced[event.request_id] == event.output_tokens
            first_tokens[event.request_id] += event.first_token
            if event.finish_reason is not None:
                finished.add(event.request_id)

    # Every admitted request finishes (possibly after preemptions) with exactly its tokens.
    for rid, spec in by_id.items():
        if rid in aborted:
            continue
        assert rid in finished, f"{rid} never finished (preempted: {rid in preempted_ever})"
        assert produced[rid] == spec.output
        assert first_tokens[rid] == 1
    final = eng.stats()
    assert final.kv_blocks_used == 0 and final.running == 0 and final.waiting == 0

    # FCFS order within a priority: requests of one priority start in arrival order.
    for prio in {s.priority for s in workload}:
        order = [rid for rid in started if by_id[rid].priority == prio]
        arrivals = [(by_id[rid].arrive_step, int(rid[1:])) for rid in order]
        assert arrivals == sorted(arrivals)
    if policy == "fcfs":
        arrivals = [(by_id[rid].arrive_step, int(rid[1:])) for rid in started]
        assert arrivals == sorted(arrivals)
