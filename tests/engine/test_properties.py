"""Hypothesis properties of the engine over random workloads, configs and aborts."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.reference import RefEngine
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
configs = {
    "workload": st.lists(specs, min_size=1, max_size=25),
    "blocks": st.integers(12, 40),
    "max_seqs": st.integers(1, 8),
    "budget": st.integers(8, 256),
    "policy": st.sampled_from(["fcfs", "priority"]),
}


def _setup(workload: list[Spec], blocks: int, max_seqs: int, budget: int,
           policy: str, sglang: bool = False) -> tuple[Engine, dict[str, Spec]]:
    eng = Engine(DEP, EngineConfig(max_num_seqs=max_seqs, max_num_batched_tokens=budget, policy=policy,  # type: ignore[arg-type]
                                   num_gpu_blocks=blocks, chunked_prefill=not sglang, reserve_outputs=sglang))
    capacity = blocks * 16
    # Every request fits the KV cache alone (the engine refuses the others; tested elsewhere).
    for spec in workload:
        spec.output = max(1, min(spec.output, capacity - spec.prompt + 1))
    return eng, {f"r{i}": spec for i, spec in enumerate(workload)}


@settings(max_examples=150, deadline=None)
@given(**configs, sglang=st.booleans())
def test_engine_invariants(workload: list[Spec], blocks: int, max_seqs: int, budget: int, policy: str,
                           sglang: bool) -> None:
    eng, by_id = _setup(workload, blocks, max_seqs, budget, policy, sglang)
    produced: dict[str, int] = dict.fromkeys(by_id, 0)
    first_tokens: dict[str, int] = dict.fromkeys(by_id, 0)
    finished: dict[str, int] = {}
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
        assert result.start == now
        now += result.duration
        step += 1
        assert step < 20_000, "engine stalled"

        # KV blocks are never over-committed and never leak.
        stats = eng.stats()
        assert 0 <= stats.kv_blocks_used <= stats.kv_blocks_total
        assert eng.held_blocks() == stats.kv_blocks_used
        assert 0.0 <= stats.kv_usage <= 1.0 and 0.0 <= stats.fragmentation < 1.0
        assert stats.running <= max_seqs
        assert (eng.num_running, eng.num_waiting) == (stats.running, stats.waiting)
        assert result.prefill_tokens + result.decode_seqs <= budget
        if sglang:  # prefill first (a step that prefills holds no decodes), outputs reserved (nothing preempted)
            assert not (result.prefill_tokens and result.decode_seqs) and not result.preempted
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
        for rid in result.first_token:
            first_tokens[rid] += 1
        new_tokens = 0
        for done in result.finished:
            assert done.request_id not in finished and done.request_id not in eng
            new_tokens += done.output_tokens - produced[done.request_id]
            finished[done.request_id] = done.output_tokens
        # Progress of running requests: never backwards, at most one token a step.
        for rid in added:
            if rid in eng:
                now_out = eng.output_tokens(rid)
                assert produced[rid] <= now_out <= produced[rid] + 1
                new_tokens += now_out - produced[rid]
                produced[rid] = now_out
        assert new_tokens == result.new_tokens

    # Every admitted request finishes (possibly after preemptions) with exactly its tokens.
    for rid, spec in by_id.items():
        if rid in aborted:
            continue
        assert rid in finished, f"{rid} never finished (preempted: {rid in preempted_ever})"
        assert finished[rid] == spec.output
        assert first_tokens[rid] == 1
    final = eng.stats()
    assert final.kv_blocks_used == 0 and final.running == 0 and final.waiting == 0
    assert final.generation_tokens >= sum(finished.values())

    # FCFS order within a priority: requests of one priority start in arrival order.
    for prio in {s.priority for s in workload}:
        order = [rid for rid in started if by_id[rid].priority == prio]
        arrivals = [(by_id[rid].arrive_step, int(rid[1:])) for rid in order]
        assert arrivals == sorted(arrivals)
    if policy == "fcfs":
        arrivals = [(by_id[rid].arrive_step, int(rid[1:])) for rid in started]
        assert arrivals == sorted(arrivals)


@settings(max_examples=200, deadline=None)
@given(**configs)
def test_counts_agree_with_per_request_reference(workload: list[Spec], blocks: int, max_seqs: int, budget: int,
                                                 policy: str) -> None:
    """The clock/heap/bucket bookkeeping gives, step by step, what touching every request gives."""
    eng, by_id = _setup(workload, blocks, max_seqs, budget, policy)
    ref = RefEngine(DEP, eng.config, blocks)
    step = 0
    now = 0.0
    while True:
        for rid, spec in by_id.items():
            if spec.arrive_step == step:
                req = Request(rid, spec.prompt, spec.output, spec.priority)
                eng.add_request(req, now)
                ref.add(req, now)
            if spec.abort_step == step and rid in eng:
                eng.abort(rid)
                ref.abort(rid)
        if step > max(s.arrive_step for s in workload) and not eng.has_work():
            break
        got = eng.step(now)
        want = ref.step()
        step += 1
        assert step < 20_000, "engine stalled"
        assert got.duration == want.duration, f"step {step}"
        assert got.preempted == want.preempted
        assert got.scheduled_first == want.scheduled_first
        assert (got.prefill_tokens, got.decode_seqs) == (want.prefill_tokens, want.decode_seqs)
        assert sorted(got.first_token) == sorted(want.first_token)
        assert sorted(got.finished) == sorted(want.finished)
        assert eng.stats().kv_blocks_used == blocks - ref.free
        assert {rid: eng.output_tokens(rid) for rid in ref.by_id} == {rid: ref.output_tokens(rid) for rid in ref.by_id}
        now += got.duration
    assert not ref.by_id
