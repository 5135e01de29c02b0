"""How long ``turbogate sim --trace`` takes for a whole hour of real traffic on a 16-GPU fleet.

Runs the command line end to end as a child process (reading the Azure conversation trace's CSV,
simulating every request at its own time on examples/fleet-16xh100.yaml behind
examples/gateway.yaml, writing the run folder and its report), ``--runs`` times, and prints one
JSON object: the child's CPU seconds (user + system: what one core spends) and wall seconds per
run, the requests simulated, and the load average around the runs (a busy machine stretches the
wall figure, not the CPU one).  Target: under 60 s on one core.

    python benchmarks/trace_sim_speed.py [--runs 3] [--trace PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "azure-llm-2023-conv.csv"


def one_run(trace: Path, out: Path) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "turbogate", "sim", "--config", str(ROOT / "examples" / "gateway.yaml"),
                    "--fleet", str(ROOT / "examples" / "fleet-16xh100.yaml"), "--trace", str(trace),
                    "--tiers", "turbo=0.2,standard=0.8", "--no-progress", "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=TRACE)
    args = ap.parse_args()
    if not args.trace.exists():
        raise SystemExit(f"trace_sim_speed: no trace at {args.trace} (shared/traces beside the clone; or --trace)")
    load_before = os.getloadavg()[0]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            runs.append(one_run(args.trace, Path(tmp) / f"run-{i}"))
        summary = json.loads((Path(tmp) / "run-0" / "summary.json").read_text())
    cpu = sorted(r["cpu_s"] for r in runs)
    print(json.dumps({"trace": args.trace.name, "fleet": "examples/fleet-16xh100.yaml",
                      "requests": summary["overall"]["all"]["requests"], "runs": runs,
                      "cpu_s_median": cpu[len(cpu) // 2], "under_60s_on_one_core": cpu[len(cpu) // 2] < 60.0,
                      "loadavg_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)]}))


if __name__ == "__main__":
    main()
