"""L4 job checks (sched/jobgraph.py): every problem is found and names its step."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from turbogate.sched.jobgraph import JobLimits, check_job, parse_ref


def step(sid: str, deps: tuple[str, ...] = (), content: Any = "hi", **extra: Any) -> dict[str, Any]:
    return {"id": sid, "depends_on": list(deps),
            "request": {"model": "m", "messages": [{"role": "user", "content": content}]}, **extra}


A_CONTENT = {"$ref": "a.choices[0].message.content"}
DIAMOND = {"steps": [step("a"), step("b", ("a",), A_CONTENT), step("c", ("a",), A_CONTENT),
                     step("d", ("b", "c"), "{{b}} / {{c}}", inputs={"b": "b.choices[0].message.content",
                                                                   "c": "c.choices[0].message.content"})]}


def kinds(data: Any, limits: JobLimits | None = None) -> list[tuple[str, str | None]]:
    return [(p.kind, p.step) for p in check_job(data, limits).problems]


def test_a_diamond_is_valid_with_its_order_depth_and_fan_out() -> None:
    graph = check_job(DIAMOND)
    assert graph.ok, graph.problems
    assert graph.order == ("a", "b", "c", "d")
    assert graph.depth == 2 and graph.fan_out == 2


def test_a_cycle_names_a_step_in_it_and_the_loop() -> None:
    graph = check_job({"steps": [step("a", ("c",)), step("b", ("a",)), step("c", ("b",)), step("x")]})
    [problem] = graph.problems
    assert problem.kind == "cycle" and problem.step in {"a", "b", "c"}
    assert problem.field.endswith(".depends_on")
    loop = problem.message.split(": ", 1)[1].split(" → ")
    assert loop[0] == loop[-1] and set(loop) == {"a", "b", "c"}
    assert graph.depth is None and graph.order == ("x",)


def test_a_step_that_depends_on_itself_is_a_cycle() -> None:
    assert kinds({"steps": [step("a", ("a",))]}) == [("cycle", "a")]


def test_too_deep_names_each_step_past_the_limit() -> None:
    chain = {"steps": [step("a"), step("b", ("a",)), step("c", ("b",)), step("d", ("c",))]}
    assert kinds(chain) == [("too_deep", "d")]
    assert kinds(chain, JobLimits(max_depth=1)) == [("too_deep", "c"), ("too_deep", "d")]
    assert kinds(chain, JobLimits(max_depth=3)) == []


def test_too_wide_names_the_step_with_too_many_dependents() -> None:
    wide = {"steps": [step("root"), *(step(f"s{i}", ("root",)) for i in range(4))]}
    graph = check_job(wide)
    assert [(p.kind, p.step) for p in graph.problems] == [("too_wide", "root")]
    assert "s0, s1, s2, s3" in graph.problems[0].message and graph.fan_out == 4
    assert kinds(wide, JobLimits(max_fan_out=4)) == []


def test_unknown_references_and_dependencies_name_the_step() -> None:
    data = {"steps": [step("a"), step("b", ("zz",), {"$ref": "nope.choices[0]"}),
                      step("c", (), {"$ref": "a.choices[0].message.content"}),
                      step("d", ("a",), {"$ref": "a..x"}),
                      step("e", ("a",), inputs={"t": "ghost.x"})]}
    problems = check_job(data).problems
    assert [(p.kind, p.step) for p in problems] == [
        ("unknown_step", "b"), ("unknown_reference", "b"), ("unknown_reference", "c"),
        ("unknown_reference", "d"), ("unknown_reference", "e")]
    assert "does not depend on" in problems[2].message and problems[4].field == "steps[4].inputs.t"


def test_shape_problems_are_all_reported_at_once() -> None:
    data = {"steps": [{"id": "a", "request": {"messages": []}, "depend_on": ["x"]},
                      {"id": "a", "request": {"model": "m", "messages": [1]}},
                      {"id": "b", "request": {"model": "m", "messages": [1], "stream": True, "service_tier": "flex"}},
                      {"request": {}}],
            "service_tier": "ultra", "extra": 1}
    got = [(p.kind, p.step, p.field) for p in check_job(data).problems]
    assert ("invalid", None, "extra") in got and ("invalid", None, "service_tier") in got
    assert ("invalid", "a", "steps[0].depend_on") in got and ("invalid", "a", "steps[0].request.model") in got
    assert ("invalid", "a", "steps[0].request.messages") in got and ("duplicate_step", "a", "steps[1].id") in got
    assert ("invalid", "b", "steps[2].request.stream") in got
    assert ("invalid", "b", "steps[2].request.service_tier") in got
    assert ("invalid", None, "steps[3].id") in got
    assert kinds([1, 2]) == [("invalid", None)] and kinds({"steps": []}) == [("invalid", None)]


def test_too_many_steps() -> None:
    assert kinds({"steps": [step(f"s{i}") for i in range(5)]}, JobLimits(max_steps=4)) == [("too_many_steps", None)]


def test_parse_ref() -> None:
    ref = parse_ref("step1.choices[0].message.content")
    assert ref is not None and ref.step == "step1" and ref.path == ("choices", 0, "message", "content")
    assert parse_ref("a") is not None and parse_ref("a.") is None and parse_ref(".a") is None
    assert parse_ref("a[x]") is None


@given(st.lists(st.lists(st.integers(0, 7), max_size=3), min_size=1, max_size=8))
def test_order_puts_every_dependency_first_or_reports_a_cycle(edges: list[list[int]]) -> None:
    n = len(edges)
    data = {"steps": [step(f"s{i}", tuple(f"s{j}" for j in deps if j < n)) for i, deps in enumerate(edges)]}
    graph = check_job(data, JobLimits(max_depth=99, max_fan_out=99))
    cycles = [p for p in graph.problems if p.kind == "cycle"]
    if cycles:
        assert graph.depth is None and len(graph.order) < n
    else:
        assert graph.ok and len(graph.order) == n
        pos = {sid: i for i, sid in enumerate(graph.order)}
        for s in graph.steps:
            assert all(pos[d] < pos[s.id] for d in s.depends_on)


def test_a_request_nested_too_deep_is_refused_without_recursion() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    assert kinds({"steps": [step("a", content=deep)]}) == [("invalid", "a")]
