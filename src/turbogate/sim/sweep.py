"""``--sweep qps=A:B:S``: one constant-rate run per point, in parallel processes or on Ray.

Each point writes its own run folder; a combined run folder holds every point's requests
shifted onto consecutive windows, one step per point, so the usual knee detector and ROI
bands read the sweep like a stepped bench run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from typing import Any

from turbogate.errors import ConfigError
from turbogate.results import RequestRecord, Step
from turbogate.sim.build import SimConfig
from turbogate.sim.run import SimOutcome, simulate


def parse_sweep(spec: str) -> list[float]:
    """``qps=10:200:10`` → [10, 20, …, 200] (start:stop:step, stop included)."""
    name, sep, rng = spec.partition("=")
    if name.strip() != "qps" or not sep:
        raise ConfigError(f"--sweep: {spec!r} must be qps=START:STOP:STEP (only qps can be swept)")
    try:
        start, stop, step = (float(x) for x in rng.split(":"))
    except ValueError:
        raise ConfigError(f"--sweep: {rng!r} must be three numbers START:STOP:STEP") from None
    if start <= 0 or step <= 0 or stop < start:
        raise ConfigError("--sweep: need 0 < START <= STOP and STEP > 0")
    n = math.floor((stop - start) / step + 1e-9) + 1
    if n > 1000:
        raise ConfigError(f"--sweep: {n} points is too many (at most 1000)")
    return [round(start + i * step, 9) for i in range(n)]


def point_config(sc: SimConfig, qps: float) -> SimConfig:
    load = replace(sc.load, shape="constant", qps=qps, qps_start=qps, qps_end=qps, steps=1)
    return replace(sc, load=load, extra={**sc.extra, "sweep_point_qps": qps})


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_points(configs: Sequence[SimConfig], *, jobs: int, ray_address: str | None = None,
               on_done: Callable[[int], None] | None = None) -> list[SimOutcome]:
    """Simulate each config; results in input order.  ``on_done(i)`` as each finishes."""
    if ray_address is not None:
        return _run_ray(configs, ray_address, on_done)
    out: list[SimOutcome | None] = [None] * len(configs)
    if jobs <= 1 or len(configs) == 1:
        for i, c in enumerate(configs):
            out[i] = simulate(c)
            if on_done:
                on_done(i)
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(configs))) as pool:
            futs = {pool.submit(simulate, c): i for i, c in enumerate(configs)}
            for fut in as_completed(futs):
                i = futs[fut]
                out[i] = fut.result()
                if on_done:
                    on_done(i)
    return [o for o in out if o is not None]


def _simulate(config: SimConfig) -> SimOutcome:
    """``simulate`` as a Python function: ``ray.remote`` takes no other kind, and in a compiled
    build (docs/install.md) ``simulate`` is a C one."""
    return simulate(config)


def _run_ray(configs: Sequence[SimConfig], address: str, on_done: Callable[[int], None] | None) -> list[SimOutcome]:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs the 'ray' package: pip install 'turbogate[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        kwargs: dict[str, Any] = {"address": address, "ignore_reinit_error": True, "log_to_driver": False}
        if address == "local":
            kwargs.update(num_cpus=default_jobs(), include_dashboard=False)
        ray.init(**kwargs)
    try:
        task = ray.remote(_simulate)
        refs = [task.remote(c) for c in configs]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list[SimOutcome | None] = [None] * len(configs)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                out[index[ref]] = ray.get(ref)
                if on_done:
                    on_done(index[ref])
        return [o for o in out if o is not None]
    finally:
        if started_here:
            ray.shutdown()


def combine(points: Sequence[float], outcomes: Sequence[SimOutcome]) -> tuple[list[RequestRecord], list[Step], float]:
    """All points on one time axis: point i's requests shifted to start at i × span, step i."""
    span = math.ceil(max(o.duration_s for o in outcomes)) + 1.0
    records: list[RequestRecord] = []
    steps: list[Step] = []
    next_id = 0
    for i, (qps, o) in enumerate(zip(points, outcomes, strict=True)):
        off = i * span
        window = o.steps[-1].end_s - o.steps[0].start_s if o.steps else 0.0
        steps.append(Step(i, off, off + window, qps))
        for r in o.records:
            records.append(replace(r, id=next_id, step=i, offered_rps=qps, scheduled_s=r.scheduled_s + off,
                                   sent_s=None if r.sent_s is None else r.sent_s + off,
                                   end_s=None if r.end_s is None else r.end_s + off))
            next_id += 1
    return records, steps, len(points) * span
