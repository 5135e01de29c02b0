"""How locked each published closed-loop TTFT looks: the stepped engine's two bounds beside the figure.

A closed loop of fixed-length clients can lock into groups that prefill behind each other on every
round (docs/plan.md, "not taken").  For each published TTFT cell at 2 clients or more this replays the
cell twice in virtual time under its engine profile:

* ``free``: the calibration's own replay (clients staggered, outputs spread ±20 %): de-synchronised;
* ``locked``: every client at t = 0, every length fixed: the engine keeps the groups for good;

and reports ``lock_share`` = (published − free) / (locked − free): 0 where the published run looks
de-synchronised, 1 where it looks fully locked (meaningless where the bounds are close or inverted).
Prints ONE JSON object.

    python benchmarks/closed_loop_lock.py [--min-clients 2]
"""

from __future__ import annotations

import argparse
import json
import time

from turbogate.perf.cells import published_cells
from turbogate.perf.profiles import get_profile
from turbogate.plan import fidelity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-clients", type=int, default=2, help="closed loops with at least this many clients")
    args = parser.parse_args()
    began = time.perf_counter()
    rows = []
    for cell in published_cells():
        load = cell.load
        if load.kind != "concurrency" or load.concurrency < args.min_clients or not cell.metric.startswith("ttft"):
            continue
        profile = get_profile(cell.engine_profile)
        free = fidelity.engine(cell, profile).predicted
        locked = fidelity.engine(cell, profile, start="together", output_spread=0.0).predicted
        gap = locked - free
        rows.append({"id": cell.id, "split": cell.split, "clients": load.concurrency, "published_ms": cell.value,
                     "free_ms": round(free, 1), "locked_ms": round(locked, 1),
                     "lock_share": round((cell.value - free) / gap, 2) if abs(gap) > 1e-9 else None})
    print(json.dumps({"cells": rows, "wall_s": round(time.perf_counter() - began, 1)}))


if __name__ == "__main__":
    main()
