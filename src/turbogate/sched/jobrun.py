"""L4 job graphs, part two: one job's run as a pure state machine (events in, actions out).

The driver (the gateway's ``gateway/jobs.py``, or a test with a fake clock) asks ``start`` for
the steps that may run now, runs each as an ordinary request (it enters L1 with the job's tier),
and reports ``succeeded`` / ``failed`` / ``aborted``; each report returns the steps that became
ready.  Every ``StartStep`` carries its request with the references already replaced by the
values from the answers they name.  ``cancel`` stops what has not run and names the running
steps whose calls the driver should abort.

A step whose dependency failed, was cancelled or was skipped is skipped; independent branches
go on.  The job ends when every step has ended: succeeded when all did, cancelled after a
cancel, failed otherwise.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from turbogate.errors import TurbogateError
from turbogate.sched.jobgraph import JobGraph, Ref, Step, parse_ref
from turbogate.sched.tiers import parse_tier

_PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")


class StepStatus(StrEnum):
    PENDING = "pending"  # waits for its dependencies
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # a dependency did not succeed


class JobStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


_ENDED = frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.CANCELLED, StepStatus.SKIPPED})


class StartStep(NamedTuple):
    """Run ``step`` now with this request body (references replaced, the job's tier set)."""

    step: str
    request: dict[str, Any]


class RefNotFound(TurbogateError):
    """A reference names a value the answer does not have."""


@dataclass(slots=True, eq=False)
class StepRun:
    step: Step
    status: StepStatus = StepStatus.PENDING
    request: dict[str, Any] | None = None  # as sent, once started
    output: Any = None  # the answer (JSON) when it succeeded
    error: str | None = None
    http_status: int | None = None
    started_at: float | None = None
    finished_at: float | None = None


def resolve(ref: Ref, output: Any) -> Any:
    """The value at ``ref.path`` in ``output``; ``RefNotFound`` says where the path breaks."""
    value = output
    walked = ref.step
    for key in ref.path:
        if isinstance(key, int):
            if not isinstance(value, list) or key >= len(value):
                size = f"a list of {len(value)}" if isinstance(value, list) else type(value).__name__
                raise RefNotFound(f"{ref.text!r}: {walked} is {size}, it has no [{key}]")
            value = value[key]
            walked += f"[{key}]"
        else:
            if not isinstance(value, dict) or key not in value:
                raise RefNotFound(f"{ref.text!r}: {walked} has no {key!r}")
            value = value[key]
            walked += f".{key}"
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def substitute(request: Any, inputs: dict[str, Any], outputs: dict[str, Any]) -> Any:
    """``request`` with each ``{"$ref"}`` node and ``{{input}}`` placeholder replaced."""

    def value_of(target: str) -> Any:
        if target in inputs:
            return inputs[target]
        ref = parse_ref(target)
        assert ref is not None and ref.step in outputs, "check_job rejects unknown references"
        return resolve(ref, outputs[ref.step])

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            if set(v) == {"$ref"}:
                return copy.deepcopy(value_of(v["$ref"]))
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and inputs and "{{" in v:
            return _PLACEHOLDER.sub(lambda m: _as_text(inputs[m.group(1)]) if m.group(1) in inputs
                                    else m.group(0), v)
        return v

    return walk(request)


@dataclass(slots=True, eq=False)
class JobRun:
    """One job's progress; ``graph`` must have passed ``check_job`` (no problems)."""

    graph: JobGraph
    created_at: float
    steps: dict[str, StepRun] = field(init=False)
    cancelled: bool = False
    finished_at: float | None = None

    def __post_init__(self) -> None:
        if not self.graph.ok:
            raise ValueError("a job with problems cannot run: " + "; ".join(map(str, self.graph.problems)))
        # In topological order, so views and ``start`` list steps in the order they may run.
        self.steps = {sid: StepRun(self.graph.step(sid)) for sid in self.graph.order}

    # ---- state -----------------------------------------------------------------------------------
    @property
    def status(self) -> JobStatus:
        runs = self.steps.values()
        if any(r.status not in _ENDED for r in runs):
            return JobStatus.RUNNING
        if self.cancelled:
            return JobStatus.CANCELLED
        if all(r.status is StepStatus.SUCCEEDED for r in runs):
            return JobStatus.SUCCEEDED
        return JobStatus.FAILED

    @property
    def done(self) -> bool:
        return self.status is not JobStatus.RUNNING

    def running(self) -> list[str]:
        return [sid for sid, r in self.steps.items() if r.status is StepStatus.RUNNING]

    # ---- events ----------------------------------------------------------------------------------
    def start(self, now: float) -> list[StartStep]:
        """The steps whose dependencies have all succeeded, now marked running."""
        out: list[StartStep] = []
        progressed = True
        while progressed and not self.cancelled:
            progressed = False
            for sid, run in self.steps.items():
                if run.status is not StepStatus.PENDING:
                    continue
                deps = [self.steps[d] for d in run.step.depends_on]
                if any(d.status in _ENDED and d.status is not StepStatus.SUCCEEDED for d in deps):
                    self._end(run, StepStatus.SKIPPED, now, error="a dependency did not succeed: " + ", ".join(
                        d.step.id for d in deps if d.status is not StepStatus.SUCCEEDED))
                    progressed = True
                    continue
                if not all(d.status is StepStatus.SUCCEEDED for d in deps):
                    continue
                try:
                    request = self._request_for(run.step)
                except RefNotFound as exc:  # the answer lacks what the reference names: this step fails
                    self._end(run, StepStatus.FAILED, now, error=f"reference {exc}")
                    progressed = True
                    continue
                run.status = StepStatus.RUNNING
                run.request = request
                run.started_at = now
                out.append(StartStep(sid, request))
        self._maybe_finish(now)
        return out

    def succeeded(self, step: str, output: Any, now: float, http_status: int = 200) -> list[StartStep]:
        run = self.steps[step]
        if run.status is StepStatus.RUNNING:
            run.output = output
            run.http_status = http_status
            self._end(run, StepStatus.SUCCEEDED, now)
        return self.start(now)

    def failed(self, step: str, error: str, now: float, http_status: int | None = None,
               output: Any = None) -> list[StartStep]:
        run = self.steps[step]
        if run.status is StepStatus.RUNNING:
            run.http_status = http_status
            run.output = output
            self._end(run, StepStatus.FAILED, now, error=error)
        return self.start(now)

    def aborted(self, step: str, now: float) -> list[StartStep]:
        """A running step's call was abandoned after ``cancel``."""
        run = self.steps[step]
        if run.status is StepStatus.RUNNING:
            self._end(run, StepStatus.CANCELLED, now, error="the job was cancelled while this step ran")
        return self.start(now)

    def cancel(self, now: float) -> list[str]:
        """Cancel every step not yet started; the running steps' ids, for the driver to abort."""
        if self.done:
            return []
        self.cancelled = True
        for run in self.steps.values():
            if run.status is StepStatus.PENDING:
                self._end(run, StepStatus.CANCELLED, now, error="the job was cancelled before this step ran")
        self._maybe_finish(now)
        return self.running()

    # ---- helpers ---------------------------------------------------------------------------------
    def _request_for(self, step: Step) -> dict[str, Any]:
        outputs = {d: self.steps[d].output for d in step.depends_on}
        inputs = {name: resolve(ref, outputs[ref.step]) for name, ref in step.inputs.items()}
        request = substitute(dict(step.request), inputs, outputs)
        assert isinstance(request, dict)
        tier = self.graph.tier
        if tier is not None and parse_tier(tier) is not None:
            request["service_tier"] = tier
        return request

    @staticmethod
    def _end(run: StepRun, status: StepStatus, now: float, error: str | None = None) -> None:
        run.status = status
        run.finished_at = now
        if error is not None:
            run.error = error

    def _maybe_finish(self, now: float) -> None:
        if self.finished_at is None and self.done:
            self.finished_at = now
