"""``bench --workers N``: one open-loop schedule, sent by N processes.

One Python process sends a few thousand requests a second before its own event loop makes sends
late (dispatch lag).  With ``--workers N`` the parent builds the schedule exactly as for one
worker (same seed, same times, same prompts) and hands worker ``k`` the items ``k, k+N, k+2N, …``:
disjoint slices of the same schedule, so the offered load is unchanged.  All workers start on
one wall-clock instant chosen once every worker has started up, and send at the schedule's
absolute times from there.  The parent keeps the live display, the scrapes and the run folder;
each worker sends its records back when done, and its p99 dispatch lag is reported on its own
(a lagging worker is named, not averaged away).

Workers are separate processes (``spawn``), talking to the parent over one pipe each:
``ready`` → ``start(wall time)`` → records; progress counters live in shared memory.  With
``--ray ADDRESS`` they are Ray actors spread over the cluster's hosts instead, with the same
protocol as method calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

from turbogate.bench.arrivals import Scheduled
from turbogate.bench.runner import LiveState, Runner, Target
from turbogate.errors import TurbogateError
from turbogate.results.percentile import percentile
from turbogate.results.schema import RequestRecord

#: Counters each worker publishes for the parent's live display, in this order.
COUNTERS = ("dispatched", "in_flight", "done", "ok", "errors", "unfinished")
#: How often a worker publishes its counters (s).
PUBLISH_S = 0.25
#: Seconds between the last worker reporting ready and the common start.
START_LEAD_S = 0.5


class WorkerFailed(TurbogateError):
    """A bench worker process died or failed to start."""


@dataclass(frozen=True)
class WorkerJob:
    index: int
    target: Target
    items: Sequence[Scheduled]
    grace_s: float
    drain_s: float | None


def split(schedule: Sequence[Scheduled], workers: int) -> list[list[Scheduled]]:
    """Disjoint interleaved slices: worker k sends items k, k+N, …, so each sees the same mix."""
    return [list(schedule[k::workers]) for k in range(workers)]


def p99_lag_ms(records: Sequence[RequestRecord]) -> float | None:
    lag = percentile((r.dispatch_lag_s for r in records if r.sent_s is not None), 99)
    return None if lag is None else 1000.0 * lag


def _publish(state: LiveState, counters: Any, index: int) -> None:
    base = index * len(COUNTERS)
    for i, name in enumerate(COUNTERS):
        counters[base + i] = float(getattr(state, name))


async def _work(job: WorkerJob, conn: Connection, counters: Any,
                stop: Any, cancel: Any) -> list[RequestRecord]:
    loop = asyncio.get_running_loop()
    conn.send(("ready", job.index))
    start_wall = await loop.run_in_executor(None, conn.recv)
    async with Runner(job.target, start_wall=float(start_wall)) as runner:

        async def watch() -> None:
            while True:
                _publish(runner.state, counters, job.index)
                if stop.is_set():
                    runner.stop.set()
                if cancel.is_set():
                    runner.cancel_in_flight()
                await asyncio.sleep(PUBLISH_S)

        watcher = asyncio.create_task(watch())
        try:
            await runner.execute(job.items, grace_s=job.grace_s, drain_s=job.drain_s)
        finally:
            watcher.cancel()
            _publish(runner.state, counters, job.index)
        return runner.records


def _worker_main(job: WorkerJob, conn: Connection, counters: Any, stop: Any,
                 cancel: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C reaches it and it tells us
    try:
        try:  # the same event loop as a one-process bench (bench/cli.py): uvloop, several times cheaper per turn
            import uvloop
        except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
            records = asyncio.run(_work(job, conn, counters, stop, cancel))
        else:
            records = uvloop.run(_work(job, conn, counters, stop, cancel))
        conn.send(("records", records))
    except BaseException as exc:  # the parent must hear of it, not wait forever
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class WorkerPool:
    """The N worker processes of one bench run, driven from the parent's event loop."""

    def __init__(self, jobs: Sequence[WorkerJob]) -> None:
        ctx = mp.get_context("spawn")
        self.jobs = list(jobs)
        self.counters: Any = ctx.Array("d", len(jobs) * len(COUNTERS), lock=False)
        self._stop = ctx.Event()
        self._cancel = ctx.Event()
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for job in self.jobs:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, args=(job, child, self.counters, self._stop, self._cancel),
                               name=f"turbogate-bench-worker-{job.index}", daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids, in worker order (for measuring their CPU time)."""
        return [int(p.pid) for p in self._procs]

    async def _recv(self, conn: Connection, timeout: float) -> tuple[str, Any]:
        loop = asyncio.get_running_loop()
        ready = await loop.run_in_executor(None, conn.poll, timeout)
        if not ready:
            raise WorkerFailed(f"a bench worker sent nothing for {timeout:.0f} s")
        try:
            msg: tuple[str, Any] = conn.recv()
        except EOFError:
            raise WorkerFailed("a bench worker exited without its records (see its error above)") from None
        if msg[0] == "error":
            raise WorkerFailed(f"a bench worker failed: {msg[1]}")
        return msg

    async def start(self, startup_timeout_s: float = 60.0) -> float:
        """Wait until every worker is up, then start them all on one wall-clock instant (returned)."""
        for conn in self._conns:
            await self._recv(conn, startup_timeout_s)
        start_wall = time.time() + START_LEAD_S
        for conn in self._conns:
            conn.send(start_wall)
        return start_wall

    async def refresh(self, state: LiveState, now: float) -> None:
        """Sum the workers' published counters into ``state`` (the parent's live display)."""
        n = len(COUNTERS)
        _fold([list(self.counters[k * n:(k + 1) * n]) for k in range(len(self.jobs))], state, now)

    def stop(self) -> None:
        self._stop.set()

    def cancel_in_flight(self) -> None:
        self._cancel.set()

    async def results(self, timeout_s: float) -> list[list[RequestRecord]]:
        """Each worker's records, in worker order."""
        out = []
        for conn in self._conns:
            _, records = await self._recv(conn, timeout_s)
            out.append(records)
        return out

    def close(self) -> None:
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        for conn in self._conns:
            conn.close()


def _fold(per_worker: Sequence[Sequence[float]], state: LiveState, now: float) -> None:
    totals = [sum(column) for column in zip(*per_worker, strict=True)]
    new_ok = int(totals[COUNTERS.index("ok")]) - state.ok
    state.finished_at.extend([now] * max(0, new_ok))
    for name, total in zip(COUNTERS, totals, strict=True):
        setattr(state, name, int(total))


class _RayBenchWorker:
    """One worker as a Ray actor (async, so progress and stop calls run beside the sends)."""

    def __init__(self) -> None:
        self.state = LiveState()
        self.runner: Runner | None = None

    async def ready(self) -> bool:
        return True

    async def run(self, job: WorkerJob, start_wall: float) -> list[RequestRecord]:
        async with Runner(job.target, state=self.state, start_wall=start_wall) as runner:
            self.runner = runner
            await runner.execute(job.items, grace_s=job.grace_s, drain_s=job.drain_s)
            return runner.records

    async def progress(self) -> list[float]:
        return [float(getattr(self.state, name)) for name in COUNTERS]

    async def stop(self, cancel: bool) -> None:
        if self.runner is not None:
            self.runner.stop.set()
            if cancel:
                self.runner.cancel_in_flight()


class RayWorkerPool:
    """The same split across the hosts of a Ray cluster: one actor per worker, spread over nodes.
    Workers start on one wall-clock instant, so the hosts' clocks must agree (NTP)."""

    #: Remote hosts get more time between "all ready" and the start than local processes.
    LEAD_S = 1.0

    def __init__(self, jobs: Sequence[WorkerJob], address: str) -> None:
        from turbogate.raycluster import connect

        self.jobs = list(jobs)
        self._ray, self._started_here = connect(address)
        actor = self._ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(_RayBenchWorker)
        self._actors = [actor.remote() for _ in self.jobs]
        self._refs: list[Any] = []

    async def start(self, startup_timeout_s: float = 120.0) -> float:
        try:
            await asyncio.wait_for(asyncio.gather(*(a.ready.remote() for a in self._actors)), startup_timeout_s)
        except TimeoutError:
            raise WorkerFailed(f"the Ray cluster did not start {len(self._actors)} bench workers in "
                               f"{startup_timeout_s:.0f} s (one CPU each)") from None
        start_wall = time.time() + self.LEAD_S
        self._refs = [a.run.remote(job, start_wall) for a, job in zip(self._actors, self.jobs, strict=True)]
        return start_wall

    async def refresh(self, state: LiveState, now: float) -> None:
        _fold(await asyncio.gather(*(a.progress.remote() for a in self._actors)), state, now)

    def stop(self) -> None:
        for a in self._actors:
            a.stop.remote(False)

    def cancel_in_flight(self) -> None:
        for a in self._actors:
            a.stop.remote(True)

    async def results(self, timeout_s: float) -> list[list[RequestRecord]]:
        try:
            return list(await asyncio.wait_for(asyncio.gather(*self._refs), timeout_s))
        except TimeoutError:
            raise WorkerFailed(f"the Ray bench workers sent no records for {timeout_s:.0f} s") from None
        except self._ray.exceptions.RayError as exc:
            raise WorkerFailed(f"a Ray bench worker failed: {exc}") from None

    def close(self) -> None:
        for a in self._actors:
            self._ray.kill(a)
        if self._started_here:
            self._ray.shutdown()


def merge(per_worker: Sequence[Sequence[RequestRecord]]) -> list[RequestRecord]:
    """One record list in schedule order, ids renumbered so they stay unique across workers."""
    merged = sorted((r for records in per_worker for r in records), key=lambda r: (r.scheduled_s, r.id))
    return [replace(r, id=i) for i, r in enumerate(merged)]


def lag_notes(per_worker: Sequence[Sequence[RequestRecord]]) -> list[str]:
    """``worker 0: 812 requests, p99 dispatch lag 0.41 ms`` per worker."""
    notes = []
    for k, records in enumerate(per_worker):
        lag = p99_lag_ms(records)
        notes.append(f"worker {k}: {len(records)} requests, p99 dispatch lag "
                     + ("–" if lag is None else f"{lag:.2f} ms"))
    return notes


async def drive(pool: WorkerPool | RayWorkerPool, parent: Runner, wait_s: float) -> list[list[RequestRecord]]:
    """Mirror the workers' progress into ``parent``'s live state until they hand back their records."""

    async def mirror() -> None:
        told = False
        while True:
            await pool.refresh(parent.state, parent.now())
            if parent.stop.is_set() and not told:
                pool.stop()
                told = True
            await asyncio.sleep(PUBLISH_S)

    task = asyncio.create_task(mirror())
    try:
        return await pool.results(wait_s)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await pool.refresh(parent.state, parent.now())
