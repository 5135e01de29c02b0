"""Was the fleet measured, or this machine?  Per step: the bench's dispatch lag, the local gateway's CPU and
how far each emulator ran behind its own model clock.

A bench run on one machine measures the fleet only while the machine keeps up.  When one of these
signals shows the machine saturated at or below the load where the fleet's knee was claimed (or
anywhere, with no knee claimed), the run's verdict is "bounded by this machine at X req/s; the fleet's
knee is above X" and no fleet recommendation is made from it (:func:`apply_verdict`).

The gateway's CPU is read from ``/proc`` for a target on this machine (the processes listening on its
port), less the time its event loop chose to busy-poll (``turbogate_idle_poll_seconds``): one event loop
near a whole core is the gateway's own ceiling.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from turbogate.results import ALL, Sample, Summary
from turbogate.results.fmt import fmt_ms, fmt_num, fmt_pct
from turbogate.results.roi import roi_table

CPU_SAMPLE = "process_cpu_seconds_total"  # a local process's CPU, sampled by :class:`LocalCpu`
BEHIND_SAMPLE = "turbogate_emulator_behind_seconds_total"
POLL_SAMPLE = "turbogate_idle_poll_seconds_total"
GATEWAY_CPU_LIMIT = 0.85  # share of one core: an event loop this busy queues work of its own
# An emulator whose model clock lost this share of the wall time models a fleet that much slower: half the
# 10 % within which plan, sim and bench are to agree.
BEHIND_LIMIT = 0.05
# Dispatch lag matters against the requests' own latency: a p99 lag over a tenth of the median E2E offers
# visibly less load than scheduled (and below that, only ``max_lag_s``'s warning stands).
LAG_SHARE = 0.1


def listening_pids(port: int) -> list[int]:
    """Processes on this machine with a TCP socket listening on ``port`` (Linux ``/proc``; [] elsewhere)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{cols[9]}]")
    pids: list[int] = []
    if not inodes:
        return pids
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fd_dir = f"/proc/{name}/fd"
            if any(os.readlink(f"{fd_dir}/{fd}") in inodes for fd in os.listdir(fd_dir)):
                pids.append(int(name))
    return pids


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LocalCpu:
    """CPU seconds of the processes serving a target on this machine, as samples (source ``cpu:<url>``)."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        local = parts.hostname in ("127.0.0.1", "localhost", "::1")
        self.source = f"cpu:{base_url.rstrip('/')}"
        self.pids = listening_pids(parts.port or 80) if local else []

    def read(self, t: float) -> list[Sample]:
        out = []
        for pid in self.pids:
            cpu = process_cpu_s(pid)
            if cpu is not None:
                out.append(Sample(t, self.source, CPU_SAMPLE, cpu, {"pid": str(pid)}))
        return out


def with_cpu(series: Callable[[float], list[Sample]], cpu: LocalCpu) -> Callable[[float], list[Sample]]:
    """The bench's own series plus the local target's CPU, sampled at the same moments."""
    return lambda t: series(t) + cpu.read(t)


def _rate(points: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    """Increase per second of a counter from its last reading at or before ``start`` to its first at or after
    ``end`` (a step shorter than the sampling period is read over the period around it); None without two."""
    if not points:
        return None
    a = next((p for p in reversed(points) if p[0] <= start), points[0])
    b = next((p for p in points if p[0] >= end), points[-1])
    if b[0] <= a[0]:
        return None
    return max(0.0, (b[1] - a[1]) / (b[0] - a[0]))


@dataclass(frozen=True, slots=True)
class StepLoad:
    """What one step asked of this machine, and whether the machine kept up."""

    offered_rps: float
    lag_p99_s: float | None
    gateway_cpu: float | None  # busiest local gateway process, share of one core (busy-polling excluded)
    behind: float | None  # the emulator furthest behind: model-clock seconds lost per wall second
    why: tuple[str, ...]  # empty: the machine kept up

    @property
    def bound(self) -> bool:
        return bool(self.why)

    def to_dict(self) -> dict[str, Any]:
        return {"offered_rps": self.offered_rps, "lag_p99_s": self.lag_p99_s, "gateway_cpu": self.gateway_cpu,
                "emulator_behind": self.behind, "bound": self.bound, "why": list(self.why)}


@dataclass(frozen=True, slots=True)
class MachineVerdict:
    steps: tuple[StepLoad, ...]  # by offered load
    saturated_first: bool  # the machine saturated at or below the knee claimed (or with no knee claimed)
    bound_at_rps: float | None  # highest load measured cleanly below the first machine-bound step
    first_bound: StepLoad | None

    def line(self) -> str:
        if self.first_bound is None:
            return "this machine kept up at every step (dispatch lag, gateway CPU, emulator clocks)"
        fb = self.first_bound
        if not self.saturated_first:
            return (f"this machine saturated only past the fleet's knee (from {fmt_num(fb.offered_rps)} req/s: "
                    f"{'; '.join(fb.why)})")
        x = self.bound_at_rps if self.bound_at_rps is not None else fb.offered_rps
        return (f"bounded by this machine at {fmt_num(x)} req/s; the fleet's knee is above {fmt_num(x)} "
                f"(at {fmt_num(fb.offered_rps)} req/s: {'; '.join(fb.why)})")

    def to_dict(self) -> dict[str, Any]:
        return {"saturated_first": self.saturated_first, "bound_at_rps": self.bound_at_rps,
                "first_bound_rps": None if self.first_bound is None else self.first_bound.offered_rps,
                "line": self.line(), "steps": [s.to_dict() for s in self.steps]}


def _series(samples: Sequence[Sample], name: str) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        if s.name == name:
            out[s.source + "|" + s.labels.get("pid", "")].append((s.t, s.value))
    return {k: sorted(v) for k, v in out.items()}


def judge(summary: Summary, samples: Sequence[Sample], max_lag_s: float = 0.010) -> MachineVerdict:
    """Each step's machine signals, and whether the machine saturated before the fleet did."""
    e2e = summary.overall[ALL].pct("e2e", "p50") if ALL in summary.overall else None
    lag_limit = max(max_lag_s, LAG_SHARE * (e2e or 0.0))
    cpu, behind, poll = (_series(samples, n) for n in (CPU_SAMPLE, BEHIND_SAMPLE, POLL_SAMPLE))
    loads: list[StepLoad] = []
    for st in sorted((s for s in summary.steps if ALL in s.tiers and s.tiers[ALL].sent > 0),
                     key=lambda s: s.offered_rps):
        start, end = st.step.start_s, st.step.end_s
        lag = st.tiers[ALL].pct("lag", "p99")
        cpus = [r for r in (_rate(p, start, end) for p in cpu.values()) if r is not None]
        polled = max((r for r in (_rate(p, start, end) for p in poll.values()) if r is not None), default=0.0)
        gw = max(0.0, max(cpus) - polled) if cpus else None
        lost = [r for r in (_rate(p, start, end) for p in behind.values()) if r is not None]
        late = max(lost) if lost else None
        why = []
        if lag is not None and lag > lag_limit:
            why.append(f"bench dispatch lag p99 {fmt_ms(lag)} > {fmt_ms(lag_limit)}")
        if gw is not None and gw >= GATEWAY_CPU_LIMIT:
            why.append(f"gateway CPU {fmt_pct(gw)} of a core")
        if late is not None and late > BEHIND_LIMIT:
            why.append(f"an emulator ran {fmt_pct(late)} behind its model clock")
        loads.append(StepLoad(st.offered_rps, lag, gw, late, tuple(why)))
    first = next((s for s in loads if s.bound), None)
    # The knee claimed (the fleet's, else the lowest of a tier's) is the machine's when the machine was already
    # saturated at or below that load: the steps that measured it were offered by a saturated machine.
    fleet = summary.knees.get(ALL)
    claimed = [k.value for k in summary.knees.values() if k.value is not None]
    knee = fleet.value if fleet is not None and fleet.value is not None else min(claimed, default=None)
    saturated_first = first is not None and (knee is None or first.offered_rps <= knee)
    clean = [s.offered_rps for s in loads if first is not None and s.offered_rps < first.offered_rps]
    return MachineVerdict(tuple(loads), saturated_first, max(clean) if clean else None, first)


def apply_verdict(summary: Summary, verdict: MachineVerdict) -> Summary:
    """The summary as the verdict allows: a machine-bound run claims no knee and recommends nothing for the
    fleet; every run records the verdict under ``config.machine``."""
    config = {**summary.config, "machine": verdict.to_dict()}
    if not verdict.saturated_first:
        notes = [*summary.notes] + ([f"machine: {verdict.line()}"] if verdict.first_bound else [])
        return replace(summary, config=config, notes=tuple(notes))
    line = verdict.line()
    knees = {t: replace(k, verdict="inconclusive", value=None, used=None, confidence=None, note=line)
             for t, k in summary.knees.items()}
    return replace(summary, config=config, knees=knees, roi=roi_table(summary.steps, knees, summary.cost),
                   warnings=(*summary.warnings, f"machine-bound: {line}"),
                   recommendation=f"No fleet recommendation from this run: {line}. Measure the fleet with the load "
                                  "below that rate, or give the bench, the gateway and the engines more CPU "
                                  "(emulators: `turbogate emulate --time-scale` above 1, slower than real time).")


def bound_line(summary: Summary) -> str | None:
    """The machine-bound verdict a summary recorded, if its run was bounded by the machine."""
    m = summary.config.get("machine")
    return str(m["line"]) if isinstance(m, dict) and m.get("saturated_first") else None
