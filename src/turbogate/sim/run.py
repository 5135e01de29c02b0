"""One simulated run: draw the requests, run the loop, summarize, write the run folder (kind "sim")."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from turbogate.results import RequestRecord, Step, Summary, summarize, write_run
from turbogate.results.io import REQUESTS_GZ
from turbogate.sim.build import SimConfig, build_simulation


@dataclass
class SimOutcome:
    """What a run predicted (picklable: sweep workers send it back)."""

    records: list[RequestRecord]
    steps: list[Step]
    duration_s: float  # virtual seconds until the last answer
    wall_s: float
    notes: list[str]


@contextmanager
def _rare_collections() -> Iterator[None]:
    """Young collections every 1,000,000 allocations instead of 700 while the loop runs.

    The loop leaves no reference cycle per request (reference counting frees everything but
    the records; tests/sim/test_sim.py holds this), so a collection only scans: the young
    generation grows by about one record per request, and at 50,000 the GC still took 6 % of
    the simulator's time (benchmarks/sim_speed.py).  A collection now and then remains, so a
    cycle that slips in costs memory bounded by the threshold, not by the run.  Restored afterwards.
    """
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(1_000_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def simulate(sc: SimConfig, progress: Callable[[float, float], None] | None = None) -> SimOutcome:
    """Run ``sc`` in virtual time; ``progress(done_s, total_s)`` is called now and then."""
    wall = time.perf_counter()
    total = sc.load.duration_s
    sim, source = build_simulation(sc, None if progress is None else (lambda t: progress(min(t, total), total)))
    with _rare_collections():
        records = sim.run()
    records.sort(key=lambda r: r.id)
    end = max((r.end_s for r in records if r.end_s is not None), default=0.0)
    notes = [f"simulated {len(records)} requests on {sc.fleet.num_replicas} replicas, policy {sc.policy}"]
    if source.steps and records:
        notes.append(f"virtual time {end:.1f} s in {time.perf_counter() - wall:.1f} s wall")
    return SimOutcome(records, list(source.steps), max(end, source.steps[-1].end_s if source.steps else 0.0),
                      time.perf_counter() - wall, notes)


def summarize_sim(sc: SimConfig, outcome: SimOutcome, started_at: str | None = None) -> Summary:
    ld = sc.load
    return summarize(outcome.records, outcome.steps, kind="sim",
                     started_at=started_at or datetime.now(UTC).isoformat(), duration_s=outcome.duration_s,
                     config=sc.describe(), slo=ld.slo, knee_settings=ld.knee, cost=ld.cost, notes=outcome.notes)


def write_sim(out: Path, sc: SimConfig, outcome: SimOutcome, *, report: bool = True,
              records_file: str | None = REQUESTS_GZ) -> Summary:
    """The run folder; records compressed by default (:func:`turbogate.results.io.write_run`)."""
    summary = summarize_sim(sc, outcome)
    write_run(out, outcome.records, (), summary, report=report, records_file=records_file)
    return summary


def default_out(prefix: str = "sim") -> Path:
    return Path("runs") / f"{prefix}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
