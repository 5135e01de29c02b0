"""What if: one workload (a replayed trace, or any load) simulated on several fleets, one table.

``turbogate sim --trace FILE --fleet A.yaml --fleet B.yaml …`` runs the same requests on each
fleet (in parallel processes) and prints, per fleet and tier: p50 / p95 TTFT, the share shed,
the share served within the SLO (``--slo``; without one, every success counts) and the fleet's
cost per hour from the GPU catalog's indicative prices (``turbogate plan gpus``).  Each fleet's
run folder is ``<out>/<fleet file stem>``; ``whatif.json`` beside them holds the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from turbogate.perf.hardware import get_gpu
from turbogate.results import Summary
from turbogate.results.fmt import fmt_ms, fmt_num, fmt_pct
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import Fleet
from turbogate.sim.run import write_sim
from turbogate.sim.sweep import run_points


def fleet_cost_per_hour(fleet: Fleet) -> float:
    """Indicative on-demand USD per hour: every replica's chips at the catalog's price."""
    return sum(g.count * g.tp * get_gpu(g.gpu).price_per_hour for p in fleet.pools for g in p.replicas)


@dataclass(frozen=True, slots=True)
class WhatIfRow:
    fleet: str
    replicas: int
    cost_per_hour: float
    tier: str
    requests: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    shed_rate: float
    within_slo: float  # share of the tier's requests served within the SLO
    achieved_rps: float

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def rows_of(name: str, fleet: Fleet, summary: Summary) -> list[WhatIfRow]:
    cost = fleet_cost_per_hour(fleet)
    out = []
    for tier in summary.tiers:
        g = summary.overall[tier]
        window = summary.duration_s or 1.0
        out.append(WhatIfRow(name, fleet.num_replicas, cost, tier, g.requests, g.pct("ttft", "p50"),
                             g.pct("ttft", "p95"), g.shed_rate,
                             min(1.0, g.goodput_rps * window / g.requests) if g.requests else 0.0, g.achieved_rps))
    return out


def run_what_if(base: SimConfig, fleets: Sequence[tuple[str, Fleet]], out_dir: Path, *, jobs: int, report: bool,
                on_done: Callable[[int], None] | None = None) -> list[WhatIfRow]:
    """Simulate ``base`` on each fleet; write each run folder and ``whatif.json``; the table's rows."""
    configs = [replace(base, fleet=f, extra={**base.extra, "what_if_fleet": name}) for name, f in fleets]
    outcomes = run_points(configs, jobs=jobs, on_done=on_done)
    rows: list[WhatIfRow] = []
    for (name, fleet), sc, outcome in zip(fleets, configs, outcomes, strict=True):
        rows += rows_of(name, fleet, write_sim(out_dir / name, sc, outcome, report=report))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "whatif.json").write_text(json.dumps({"slo": base.load.slo.to_dict(),
                                                     "rows": [r.to_dict() for r in rows]}, indent=1))
    return rows


def print_what_if(rows: Sequence[WhatIfRow], console: Console, slo_text: str) -> None:
    t = Table(title=f"What if: the same requests on each fleet (within SLO: {slo_text})")
    for col in ("fleet", "replicas", "cost/h", "tier", "requests", "TTFT p50", "TTFT p95", "shed", "within SLO",
                "ok req/s"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.fleet, str(r.replicas), fmt_num(r.cost_per_hour),
                  r.tier, str(r.requests), fmt_ms(r.ttft_p50_s), fmt_ms(r.ttft_p95_s), fmt_pct(r.shed_rate),
                  fmt_pct(r.within_slo), fmt_num(r.achieved_rps))
    console.print(t)
