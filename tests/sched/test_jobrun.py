"""One job's run (sched/jobrun.py) with a fake clock: readiness, references, failure, cancel."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sched.test_jobgraph import DIAMOND, step
from turbogate.sched.jobgraph import check_job
from turbogate.sched.jobrun import JobRun, JobStatus, StepStatus


def answer(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}


def test_a_diamond_runs_in_order_with_references_replaced() -> None:
    run = JobRun(check_job({**DIAMOND, "service_tier": "priority"}), 0.0)
    [a] = run.start(0.0)
    assert a.step == "a" and a.request["service_tier"] == "priority"
    assert run.start(0.5) == []  # nothing else is ready while a runs
    b, c = run.succeeded("a", answer("alpha"), 1.0)
    assert (b.step, c.step) == ("b", "c")  # independent: both start at once
    assert b.request["messages"][0]["content"] == "alpha" and c.request["messages"][0]["content"] == "alpha"
    assert run.succeeded("b", answer("beta"), 2.0) == []  # d still waits for c
    [d] = run.succeeded("c", answer("gamma"), 3.0)
    assert d.request["messages"][0]["content"] == "beta / gamma"
    assert run.status is JobStatus.RUNNING
    assert run.succeeded("d", answer("delta"), 4.0) == []
    assert run.status is JobStatus.SUCCEEDED and run.finished_at == 4.0
    assert run.steps["d"].output == answer("delta") and run.steps["b"].started_at == 1.0


def test_the_original_request_is_not_changed_by_substitution() -> None:
    graph = check_job(DIAMOND)
    run = JobRun(graph, 0.0)
    run.start(0.0)
    run.succeeded("a", answer("alpha"), 1.0)
    assert graph.step("b").request["messages"][0]["content"] == {"$ref": "a.choices[0].message.content"}


def test_a_failed_step_skips_its_dependents_and_the_rest_goes_on() -> None:
    data = {"steps": [step("a"), step("b", ("a",)), step("x")]}
    run = JobRun(check_job(data), 0.0)
    assert [s.step for s in run.start(0.0)] == ["a", "x"]
    assert run.failed("a", "HTTP 503: overloaded", 1.0, 503) == []
    assert run.steps["b"].status is StepStatus.SKIPPED and "a" in (run.steps["b"].error or "")
    assert run.status is JobStatus.RUNNING  # x still runs
    run.succeeded("x", answer("x"), 2.0)
    assert run.status is JobStatus.FAILED and run.steps["a"].http_status == 503


def test_a_reference_the_answer_lacks_fails_that_step() -> None:
    data = {"steps": [step("a"), step("b", ("a",), {"$ref": "a.choices[3].message.content"})]}
    run = JobRun(check_job(data), 0.0)
    run.start(0.0)
    assert run.succeeded("a", answer("only one"), 1.0) == []
    assert run.steps["b"].status is StepStatus.FAILED and "no [3]" in (run.steps["b"].error or "")
    assert run.status is JobStatus.FAILED


def test_cancel_stops_what_has_not_run_and_names_what_runs() -> None:
    run = JobRun(check_job(DIAMOND), 0.0)
    run.start(0.0)
    run.succeeded("a", answer("alpha"), 1.0)
    assert sorted(run.cancel(1.5)) == ["b", "c"]
    assert run.steps["d"].status is StepStatus.CANCELLED
    assert run.succeeded("b", answer("late"), 2.0) == []  # an answer that was already on its way is kept
    assert run.aborted("c", 2.1) == []
    assert run.steps["b"].status is StepStatus.SUCCEEDED and run.steps["c"].status is StepStatus.CANCELLED
    assert run.status is JobStatus.CANCELLED and run.cancel(3.0) == []


def test_a_job_with_problems_cannot_run() -> None:
    with pytest.raises(ValueError, match="cycle"):
        JobRun(check_job({"steps": [step("a", ("a",))]}), 0.0)
