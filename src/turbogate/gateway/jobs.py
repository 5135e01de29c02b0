"""L4 job graphs over HTTP: ``POST /v1/jobs``, ``GET /v1/jobs/{id}``, ``DELETE /v1/jobs/{id}``.

The checks and the job's progress are the pure core's (sched/jobgraph.py, sched/jobrun.py); this
module only moves bytes.  Each ready step runs as an ordinary chat completion through the
gateway's own entry (its routes, with the job's headers): the same auth, tier
resolution, L1 admission, replica choice, retry and deadline as any request — nothing is
duplicated, and independent steps run at the same time as separate requests.

A job runs in the worker process that accepted it, which writes its view (status, steps and
their outputs) to the store as steps finish, so ``GET`` answers from any worker or gateway
sharing the store.  A ``DELETE`` reaching another one asks for the cancel in the store; the
running worker applies it at its next sync (``store.sync_interval_s``), and the ``DELETE``
answers once it has (or says ``cancel_requested`` if that takes longer than a few syncs).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from turbogate.asgi import Message, Receive, Scope, Send, error_body, read_body, send_bytes, send_error, send_json
from turbogate.configpolicy import job_limits
from turbogate.gateway.conformance import method_not_allowed
from turbogate.sched.jobgraph import JobGraph, Problem, check_job
from turbogate.sched.jobrun import JobRun, StartStep
from turbogate.store.base import JobRecord, StoreUnavailable

if TYPE_CHECKING:
    from turbogate.config import JobsConfig
    from turbogate.gateway.metering import Metering
    from turbogate.gateway.parts import AsgiHandler, Auth, Shed
    from turbogate.sched import Flow

log = logging.getLogger("turbogate.gateway")

PREFIX = "/v1/jobs"
CHAT_PATH = "/v1/chat/completions"
# Headers of the job's own request that are not passed on to its steps (each step has its own body).
_NOT_COPIED = frozenset({b"content-length", b"content-type", b"transfer-encoding", b"expect", b"connection"})
#: The store drops an unfinished job's record this long after its last write (its worker died).
_RUNNING_KEEP_S = 86400.0


@dataclass(slots=True, eq=False)
class Job:
    id: str
    tenant: str
    run: JobRun
    headers: list[tuple[bytes, bytes]]  # what each step's request carries (auth, lease, tier header)
    client: Any
    created_wall: float
    served: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # step → (tier, downgrade)
    timing: dict[str, str] = field(default_factory=dict)  # step → its Server-Timing, led by l4 (its wait)
    aborts: dict[str, asyncio.Event] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    dirty: bool = False  # the view changed since it was last written to the store
    stale: bool = False  # the last write failed (store down): written again at the next sync
    publisher: asyncio.Task[None] | None = None


def step_timing(run: JobRun, step: str, inner: bytes | None) -> str:
    """A step's Server-Timing: ``l4`` (from the job's creation to the step's start: waiting for the steps it
    depends on) before the layers its own request went through (l1, l3, l2, upstream)."""
    started = run.steps[step].started_at
    wait_ms = 0.0 if started is None else (started - run.created_at) * 1000
    return f"l4;dur={wait_ms:.3f}" + (", " + inner.decode("latin-1") if inner else "")


def problems_body(problems: list[Problem] | tuple[Problem, ...]) -> bytes:
    """A 400 in the OpenAI error shape naming the first problem's field, with every problem listed."""
    first = problems[0]
    body = orjson.loads(error_body(400, "; ".join(map(str, problems)), param=first.field, code=first.kind))
    body["error"]["problems"] = [{"kind": p.kind, "step": p.step, "field": p.field, "message": p.message}
                                 for p in problems]
    return orjson.dumps(body)


class JobsApi:
    """The job routes.  Steps run through ``entry`` (the gateway's routes), given once they exist
    (:meth:`run_steps_through`): the routes answer ``/v1/jobs`` with this object."""

    def __init__(self, config: JobsConfig, auth: Auth, flow: Flow, meter: Metering, shed: Shed,
                 max_body: int) -> None:
        self.auth = auth
        self.flow = flow
        self.meter = meter
        self.shed = shed
        self.max_body = max_body
        self.limits = job_limits(config)
        self.keep_s = config.keep_s
        self.max_jobs = config.max_jobs
        self.jobs: dict[str, Job] = {}
        self.entry: AsgiHandler | None = None
        meter.sync_hooks.append(self.sync)  # cancels asked on other workers; views the store missed

    def run_steps_through(self, entry: AsgiHandler) -> None:
        self.entry = entry

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"].rstrip("/")
        method: str = scope["method"]
        tenant = self.auth.tenant(scope)
        if tenant is None:
            await self.auth.unauthorized(send)
            return
        if path == PREFIX:
            if method != "POST":
                await method_not_allowed(send, PREFIX, "POST")
                return
            await self._create(scope, receive, send, tenant.name)
            return
        job_id = path[len(PREFIX) + 1:]
        if method not in ("GET", "DELETE"):
            await method_not_allowed(send, path, "GET", "DELETE")
            return
        job = self.jobs.get(job_id)
        if job is None and "/" not in job_id:  # run by another worker or gateway: the store has its view
            await self._elsewhere(send, job_id, tenant.name, method)
        elif "/" in job_id or job is None or job.tenant != tenant.name:  # another tenant's job is not found either
            await send_error(send, 404, f"no job {job_id!r}", param="id", code="job_not_found")
        else:
            if method == "DELETE":
                self._cancel(job)
            await send_json(send, 200, self.view(job))

    def _cancel(self, job: Job) -> None:
        for step in job.run.cancel(time.perf_counter()):
            job.aborts[step].set()  # its request sees the client leave: the flow cancels it
        if job.run.done:
            job.headers = []
        self._publish(job)

    async def _elsewhere(self, send: Send, job_id: str, tenant: str, method: str) -> None:
        """GET / DELETE of a job this worker does not run, through the store."""
        store = self.meter.store
        try:
            rec = await store.job(job_id)
            if rec is None or rec.tenant != tenant:
                await send_error(send, 404, f"no job {job_id!r}", param="id", code="job_not_found")
                return
            if method == "DELETE":
                rec = await self._cancel_elsewhere(rec)
        except StoreUnavailable:
            await self.shed.refuse(send, 503, f"job {job_id!r} is not run by this worker and the store that shares "
                                   "jobs is unreachable; retry, or ask the gateway that accepted it",
                                   "store_unavailable", 1)
            return
        await send_bytes(send, 200, rec.view)

    async def _cancel_elsewhere(self, rec: JobRecord) -> JobRecord:
        """Ask the running worker to cancel the job; its view once it has (a few syncs at most)."""
        store = self.meter.store
        await store.request_job_cancel(rec.id)
        deadline = time.monotonic() + max(2.0, 4 * self.meter.sync_interval_s)
        while True:
            view = orjson.loads(rec.view)
            if view.get("cancel_requested") or view.get("status") != "running" or time.monotonic() >= deadline:
                break
            await asyncio.sleep(min(0.05, self.meter.sync_interval_s / 4))
            rec = await store.job(rec.id) or rec
        view["cancel_requested"] = True  # asked, and kept in the store: the worker applies it at its next sync
        return JobRecord(rec.id, rec.tenant, rec.owner, orjson.dumps(view), True)

    # ---- the store ------------------------------------------------------------------------------
    def _publish(self, job: Job) -> asyncio.Task[None]:
        """Write the job's view to the store (soon; one write at a time, the latest view)."""
        job.dirty = True
        if job.publisher is None:
            job.publisher = asyncio.get_running_loop().create_task(self._publisher(job))
        return job.publisher

    async def _publisher(self, job: Job) -> None:
        meter = self.meter
        try:
            while job.dirty:
                job.dirty = False
                run = job.run
                wall = job.created_wall - run.created_at
                forget = (run.finished_at + wall + self.keep_s if run.finished_at is not None
                          else time.time() + self.keep_s + _RUNNING_KEEP_S)
                rec = JobRecord(job.id, job.tenant, meter.instance, orjson.dumps(self.view(job)))
                try:
                    await meter.store.put_job(rec, forget, time.time())
                    job.stale = False
                except StoreUnavailable:
                    job.stale = True  # the next sync after the store returns writes it
                    return
        except Exception:  # a store bug must not stop the job: its own worker still answers for it
            job.stale = True
            log.exception("job %s: view not written to the store", job.id)
        finally:
            job.publisher = None

    async def sync(self) -> None:
        """Apply cancels asked on other workers; write the views the store missed while down."""
        running = [j.id for j in self.jobs.values() if not j.run.done]
        for job_id in await self.meter.store.job_cancels(running):
            job = self.jobs.get(job_id)
            if job is not None and not job.run.cancelled:
                self._cancel(job)
        for job in list(self.jobs.values()):
            if job.stale:
                self._publish(job)

    async def _create(self, scope: Scope, receive: Receive, send: Send, tenant: str) -> None:
        body = await read_body(receive, self.max_body)  # BodyTooLarge → 413 by the caller
        if body is None:
            return
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            await send_error(send, 400, f"job body is not valid JSON: {exc}", code="invalid_json")
            return
        graph = check_job(data, self.limits)
        problems = list(graph.problems) or self._unknown_models(graph)
        if problems:
            await send_bytes(send, 400, problems_body(problems))
            return
        now = time.perf_counter()
        if not self._make_room(now):
            await self.shed.refuse(send, 429, f"this worker already holds {self.max_jobs} unfinished jobs "
                                   "(jobs.max_jobs)", "too_many_jobs", 5)
            return
        job = Job("job_" + secrets.token_hex(12), tenant, JobRun(graph, now),
                  [(k, v) for k, v in scope["headers"] if k not in _NOT_COPIED], scope.get("client"), time.time())
        self.jobs[job.id] = job
        self._start(job, job.run.start(now))
        await asyncio.shield(self._publish(job))  # in the store before the client has the id
        await send_json(send, 202, self.view(job))

    def _unknown_models(self, graph: JobGraph) -> list[Problem]:
        known = self.flow.pool_of_model
        return [Problem("unknown_model", s.id, f"steps[{i}].request.model", f"the model {s.request['model']!r} is "
                        "not served here") for i, s in enumerate(graph.steps) if s.request.get("model") not in known]

    def _make_room(self, now: float) -> bool:
        """Forget finished jobs past ``keep_s``; at the cap, the oldest finished.  False if all run."""
        for job in [j for j in self.jobs.values() if j.run.finished_at is not None
                    and j.run.finished_at + self.keep_s <= now]:
            del self.jobs[job.id]
        if len(self.jobs) < self.max_jobs:
            return True
        done = [j for j in self.jobs.values() if j.run.done]
        if not done:
            return False
        oldest = min(done, key=lambda j: j.run.finished_at or 0.0)
        del self.jobs[oldest.id]
        return True

    # ---- running steps ----------------------------------------------------------------------------
    def _start(self, job: Job, starts: list[StartStep]) -> None:
        loop = asyncio.get_running_loop()
        for start in starts:
            job.aborts[start.step] = asyncio.Event()
            task = loop.create_task(self._run_step(job, start))
            job.tasks.add(task)
            task.add_done_callback(job.tasks.discard)

    async def _run_step(self, job: Job, start: StartStep) -> None:
        try:
            nexts = await self._call(job, start)
        except Exception:  # a bug, not the step's fault: fail the step rather than leave the job running
            log.exception("job %s step %s: internal error", job.id, start.step)
            nexts = job.run.failed(start.step, "internal gateway error", time.perf_counter(), 500)
        if job.run.done:
            job.headers = []  # the key it carried is not kept longer than the job runs
        self._start(job, nexts)
        self._publish(job)

    async def _call(self, job: Job, start: StartStep) -> list[StartStep]:
        """Run one step as a chat request through the gateway's entry; report its answer to the run."""
        body = orjson.dumps(start.request)
        abort = job.aborts[start.step]
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await abort.wait()  # DELETE: the step's request sees its client leave
            return {"type": "http.disconnect"}

        status: int | None = None
        headers: dict[bytes, bytes] = {}
        chunks: list[bytes] = []

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers.update((bytes(k).lower(), bytes(v)) for k, v in message.get("headers", []))
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        scope: Scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                        "scheme": "http", "path": CHAT_PATH, "raw_path": CHAT_PATH.encode(), "query_string": b"",
                        "root_path": "", "client": job.client, "server": None,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode()), *job.headers]}
        assert self.entry is not None, "JobsApi.run_steps_through was not called"
        await self.entry(scope, receive, send)
        now = time.perf_counter()
        tier = headers.get(b"x-turbogate-tier")
        downgrade = headers.get(b"x-turbogate-downgrade")
        job.served[start.step] = (tier.decode() if tier else None, downgrade.decode() if downgrade else None)
        job.timing[start.step] = step_timing(job.run, start.step, headers.get(b"server-timing"))
        raw = b"".join(chunks)
        try:
            output: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            output = raw.decode("utf-8", "replace")
        if abort.is_set() and status in (None, 499):
            return job.run.aborted(start.step, now)
        if status == 200:
            return job.run.succeeded(start.step, output, now)
        error = output.get("error") if isinstance(output, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        return job.run.failed(start.step, f"HTTP {status}: {message or 'no answer'}", now, status, output)

    # ---- the view ---------------------------------------------------------------------------------
    def view(self, job: Job) -> dict[str, Any]:
        run = job.run
        t0 = run.created_at

        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - t0, 6)

        steps = []
        for sid, r in run.steps.items():
            tier, downgrade = job.served.get(sid, (None, None))
            steps.append({"id": sid, "status": r.status.value, "depends_on": list(r.step.depends_on),
                          "service_tier": tier, "downgrade": downgrade, "http_status": r.http_status,
                          "started_s": rel(r.started_at), "finished_s": rel(r.finished_at), "error": r.error,
                          "server_timing": job.timing.get(sid),
                          "request": r.request, "output": r.output})
        return {"id": job.id, "object": "job", "status": run.status.value, "cancel_requested": run.cancelled,
                "service_tier": run.graph.tier,
                "created_at": int(job.created_wall), "finished_s": rel(run.finished_at),
                "order": list(run.graph.order), "depth": run.graph.depth, "fan_out": run.graph.fan_out,
                "steps": steps}
