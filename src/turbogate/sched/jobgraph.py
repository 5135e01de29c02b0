"""L4 job graphs, part one: read and check a job (a DAG of chat requests), with no I/O.

A job is ``{"service_tier"?: word, "steps": [{id, request, depends_on?, inputs?}, ...]}``.  A
step's ``request`` is a chat completion body; inside it, ``{"$ref": "a.choices[0].message.content"}``
stands for a value of step ``a``'s answer (``a`` must be in ``depends_on``), ``{"$ref": "name"}``
for one of the step's ``inputs`` (``{"name": "a.choices[0].message.content"}``), and ``{{name}}``
inside a string is replaced by that input's text.

``check_job`` never stops at the first problem: it returns the graph with every problem found,
each naming its step and field, plus what ``turbogate jobs lint`` prints (depth, fan-out,
topological order).  The gateway (``POST /v1/jobs``) and the lint command share it, so a file
that lints clean is accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turbogate.sched.tiers import parse_tier

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# A reference path: a step id, then ``.key`` or ``[index]`` segments.
_SEGMENT = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]")
_STEP_KEYS = frozenset({"id", "request", "depends_on", "inputs"})
_JOB_KEYS = frozenset({"steps", "service_tier"})


@dataclass(frozen=True, slots=True)
class JobLimits:
    """How large a job may be.  Depth counts edges on the longest chain (a diamond a → b, c → d
    has depth 2); fan-out is the most steps that depend directly on one step."""

    max_depth: int = 2
    max_fan_out: int = 3
    max_steps: int = 32


@dataclass(frozen=True, slots=True)
class Ref:
    """A value taken from a finished step's answer: ``step`` then ``path`` (keys and indexes)."""

    text: str
    step: str
    path: tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a job: which step (None: the job itself), which field, and why."""

    #: invalid, duplicate_step, unknown_step, unknown_reference, cycle, too_deep, too_wide, too_many_steps
    kind: str
    step: str | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"step {self.step!r}" if self.step is not None else "job"
        return f"{where} ({self.field}): {self.message}"


@dataclass(frozen=True, slots=True)
class Step:
    id: str
    request: Mapping[str, Any]
    depends_on: tuple[str, ...]
    inputs: Mapping[str, Ref]


@dataclass(frozen=True, slots=True)
class JobGraph:
    steps: tuple[Step, ...]
    tier: str | None  # the job's service_tier word as given (every step is asked at it)
    order: tuple[str, ...]  # topological order (partial when there is a cycle)
    depth: int | None  # None when a cycle leaves it undefined
    fan_out: int
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def step(self, step_id: str) -> Step:
        return next(s for s in self.steps if s.id == step_id)

    def dependents(self) -> dict[str, list[str]]:
        return _dependents(self.steps)


def parse_ref(text: str) -> Ref | None:
    """``a.choices[0].message.content`` → Ref("a", ("choices", 0, "message", "content")); None if malformed."""
    head = re.match(r"^[A-Za-z0-9_-]+", text)
    if head is None:
        return None
    path: list[str | int] = []
    pos = head.end()
    while pos < len(text):
        m = _SEGMENT.match(text, pos)
        if m is None:
            return None
        path.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    return Ref(text, head.group(0), tuple(path))


MAX_NESTING = 64  # a step's request may nest this deep (references are replaced by a recursive walk)


def nesting(value: Any) -> int:
    """How deep ``value`` nests (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth <= MAX_NESTING:  # past the limit the answer is already known
                stack.extend((x, depth) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def request_refs(value: Any) -> list[str]:
    """Every ``{"$ref": ...}`` target inside a request body (as written, in document order)."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if set(v) == {"$ref"}:
                out.append(v["$ref"] if isinstance(v["$ref"], str) else repr(v["$ref"]))
                continue
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
    return out


class _Checker:
    def __init__(self, limits: JobLimits) -> None:
        self.limits = limits
        self.problems: list[Problem] = []

    def add(self, kind: str, step: str | None, field: str, message: str) -> None:
        self.problems.append(Problem(kind, step, field, message))

    def step(self, i: int, raw: Any, seen: set[str]) -> Step | None:
        where = f"steps[{i}]"
        if not isinstance(raw, dict):
            self.add("invalid", None, where, "a step must be an object {id, request, depends_on, inputs}")
            return None
        sid = raw.get("id")
        if not isinstance(sid, str) or not _ID.match(sid):
            self.add("invalid", None, f"{where}.id", "each step needs an id: 1-64 letters, digits, '_' or '-'")
            return None
        for key in sorted(set(raw) - _STEP_KEYS):
            self.add("invalid", sid, f"{where}.{key}", f"unknown field {key!r} (a step has id, request, "
                     "depends_on, inputs)")
        if sid in seen:
            self.add("duplicate_step", sid, f"{where}.id", f"the id {sid!r} is used by an earlier step")
            return None
        seen.add(sid)
        deps_raw = raw.get("depends_on", [])
        if not isinstance(deps_raw, list) or not all(isinstance(d, str) for d in deps_raw):
            self.add("invalid", sid, f"{where}.depends_on", "depends_on must be a list of step ids")
            deps_raw = []
        deps = tuple(dict.fromkeys(deps_raw))  # a repeated id is one dependency
        inputs = self.inputs(sid, where, raw.get("inputs", {}))
        request = raw.get("request")
        if not isinstance(request, dict):
            self.add("invalid", sid, f"{where}.request", "request must be a chat completion body (an object)")
            request = {}
        else:
            self.request(sid, where, request)
        return Step(sid, request, deps, inputs)

    def inputs(self, sid: str, where: str, raw: Any) -> dict[str, Ref]:
        if not isinstance(raw, dict):
            self.add("invalid", sid, f"{where}.inputs", "inputs must map names to references such as "
                     "'a.choices[0].message.content'")
            return {}
        out: dict[str, Ref] = {}
        for name, target in raw.items():
            field = f"{where}.inputs.{name}"
            if not _NAME.match(name):
                self.add("invalid", sid, field, "an input name is a letter or '_' then letters, digits or '_'")
                continue
            if isinstance(target, dict) and set(target) == {"$ref"}:
                target = target["$ref"]
            ref = parse_ref(target) if isinstance(target, str) else None
            if ref is None:
                self.add("invalid", sid, field, f"{target!r} is not a reference like 'a.choices[0].message.content'")
                continue
            out[name] = ref
        return out

    def request(self, sid: str, where: str, request: dict[str, Any]) -> None:
        if nesting(request) > MAX_NESTING:
            self.add("invalid", sid, f"{where}.request", f"the request nests deeper than {MAX_NESTING} levels")
        if not isinstance(request.get("model"), str) or not request["model"]:
            self.add("invalid", sid, f"{where}.request.model", "a step's request needs a model (a string)")
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            self.add("invalid", sid, f"{where}.request.messages", "a step's request needs messages (a non-empty list)")
        if request.get("stream", False) is not False:
            self.add("invalid", sid, f"{where}.request.stream", "job steps are answered whole: leave stream unset "
                     "or false")
        if "service_tier" in request:
            self.add("invalid", sid, f"{where}.request.service_tier", "every step runs at the job's tier: set "
                     "service_tier on the job, not on a step")

    def references(self, steps: list[Step], where: dict[str, str]) -> None:
        ids = {s.id for s in steps}
        for s in steps:
            for dep in s.depends_on:
                if dep not in ids:
                    self.add("unknown_step", s.id, f"{where[s.id]}.depends_on",
                             f"depends on {dep!r}, which is not a step of this job")
            targets: list[tuple[str, Ref | None, str]] = [
                (f"{where[s.id]}.inputs.{name}", ref, ref.text) for name, ref in s.inputs.items()]
            for text in request_refs(s.request):
                ref = None if text in s.inputs else parse_ref(text)
                if text not in s.inputs and ref is None:
                    self.add("unknown_reference", s.id, f"{where[s.id]}.request", f"$ref {text!r} is neither one "
                             "of the step's inputs nor a reference like 'a.choices[0].message.content'")
                    continue
                targets.append((f"{where[s.id]}.request", ref, text))
            for field, maybe_ref, text in targets:
                if maybe_ref is None:
                    continue  # an input name: its own reference is checked with the inputs
                if maybe_ref.step not in ids:
                    self.add("unknown_reference", s.id, field, f"$ref {text!r} names no step of this job "
                             f"({maybe_ref.step!r})")
                elif maybe_ref.step not in s.depends_on:
                    self.add("unknown_reference", s.id, field, f"$ref {text!r} uses step {maybe_ref.step!r}, "
                             "which this step does not depend on (add it to depends_on)")


def _dependents(steps: tuple[Step, ...] | list[Step]) -> dict[str, list[str]]:
    """For each step, the steps that depend on it directly (unknown ids ignored)."""
    out: dict[str, list[str]] = {s.id: [] for s in steps}
    for s in steps:
        for dep in s.depends_on:
            if dep in out:
                out[dep].append(s.id)
    return out


def _order(steps: list[Step]) -> tuple[list[str], set[str]]:
    """Kahn's algorithm in listing order: the topological order, and the steps it could not place."""
    ids = {s.id for s in steps}
    indegree = {s.id: sum(1 for d in s.depends_on if d in ids) for s in steps}
    dependents = _dependents(steps)
    ready = [s.id for s in steps if indegree[s.id] == 0]
    order: list[str] = []
    while ready:
        sid = ready.pop(0)
        order.append(sid)
        for nxt in dependents[sid]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    return order, ids - set(order)


def _cycles(steps: list[Step], left: set[str]) -> list[list[str]]:
    """Each distinct cycle among the unplaced steps, as a path that returns to its start."""
    deps = {s.id: [d for d in s.depends_on if d in left] for s in steps if s.id in left}
    listed = {s.id: i for i, s in enumerate(steps)}
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    for start in (s.id for s in steps if s.id in left):
        if start in state:
            continue
        path: list[str] = [start]
        iters = [iter(deps[start])]
        state[start] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
                continue
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):]
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    # Shown in run order (each step would run after the one before it), from the
                    # step listed first in the job, which is the one the problem names.
                    loop = cycle[::-1]
                    first = min(range(len(loop)), key=lambda i: listed[loop[i]])
                    loop = loop[first:] + loop[:first]
                    found.append([*loop, loop[0]])
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(deps[nxt]))
    return found


def check_job(data: Any, limits: JobLimits | None = None) -> JobGraph:
    """Read a job (parsed JSON/YAML) and report every problem; see the module docstring."""
    limits = limits or JobLimits()
    c = _Checker(limits)
    steps: list[Step] = []
    tier: str | None = None
    if not isinstance(data, dict):
        c.add("invalid", None, "(top level)", "a job is an object with a list of steps")
        return JobGraph((), None, (), None, 0, tuple(c.problems))
    for key in sorted(set(data) - _JOB_KEYS):
        c.add("invalid", None, key, f"unknown field {key!r} (a job has steps and service_tier)")
    raw_tier = data.get("service_tier")
    if raw_tier is not None:
        if parse_tier(raw_tier) is None:
            c.add("invalid", None, "service_tier", f"unknown service_tier {raw_tier!r}; use priority/turbo, "
                  "default/auto/standard or flex/relax")
        else:
            tier = str(raw_tier)
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        c.add("invalid", None, "steps", "a job needs steps (a non-empty list)")
        raw_steps = []
    if len(raw_steps) > limits.max_steps:
        c.add("too_many_steps", None, "steps", f"{len(raw_steps)} steps, over the limit of {limits.max_steps}")
    seen: set[str] = set()
    where: dict[str, str] = {}
    for i, raw in enumerate(raw_steps):
        step = c.step(i, raw, seen)
        if step is not None:
            steps.append(step)
            where[step.id] = f"steps[{i}]"
    c.references(steps, where)
    order, left = _order(steps)
    for cycle in _cycles(steps, left):
        c.add("cycle", cycle[0], f"{where[cycle[0]]}.depends_on", "in a cycle: " + " → ".join(cycle))
    by_id = {s.id: s for s in steps}
    depth_of: dict[str, int] = {}
    for sid in order:  # dependencies come first in topological order
        depth_of[sid] = max((depth_of[d] + 1 for d in by_id[sid].depends_on if d in depth_of), default=0)
    for sid in order:
        if depth_of[sid] > limits.max_depth:
            c.add("too_deep", sid, f"{where[sid]}.depends_on", f"at depth {depth_of[sid]} (its longest chain of "
                  f"dependencies), over the limit of {limits.max_depth}")
    graph_deps = _dependents(steps)
    for s in steps:
        users = graph_deps[s.id]
        if len(users) > limits.max_fan_out:
            c.add("too_wide", s.id, f"{where[s.id]}.id", f"{len(users)} steps depend on it ({', '.join(users)}), "
                  f"over the fan-out limit of {limits.max_fan_out}")
    depth = None if left else max(depth_of.values(), default=0)
    fan_out = max((len(u) for u in graph_deps.values()), default=0)
    return JobGraph(tuple(steps), tier, tuple(order), depth, fan_out, tuple(c.problems))
