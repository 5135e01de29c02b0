"""How long ``turbogate plan size`` takes to answer, as a user runs it (a fresh process, imports included).

The issue's case (Llama-3.1-70B, 50 req/s, 1000 prompt + 200 output tokens, Turbo 20 %, Turbo
p95 TTFT 0.5 s, Standard 3 s; target: an answer in at most 30 s) and, with ``--families``, two
more: Llama-3.1-8B at 200 req/s on H100/H200/A100, and Llama-3.1-70B at 20 req/s with half of it
Turbo at 0.3 s on H100/H200/B200.

    python benchmarks/plan_size_speed.py [--families]

prints one JSON object: per case the wall and CPU seconds, the simulations run, the recommended
fleet (GPU, TP, replicas, cost per hour, each tier's simulated p95 TTFT) and whether it answered
within 30 s; the load average before and after (the machine is shared: compare within one run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

TARGET_S = 30.0
ISSUE = ["--model", "llama-3.1-70b", "--peak-rps", "50", "--prompt-tokens", "1000", "--output-tokens", "200",
         "--turbo-ttft-p95", "0.5", "--standard-ttft-p95", "3", "--turbo-share", "0.2"]
FAMILIES = {
    "8b-200rps": ["--model", "llama-3.1-8b", "--peak-rps", "200", "--gpus", "H100-SXM,H200,A100-80G-SXM"],
    "70b-20rps-half-turbo": ["--model", "llama-3.1-70b", "--peak-rps", "20", "--turbo-share", "0.5",
                             "--turbo-ttft-p95", "0.3", "--standard-ttft-p95", "2", "--gpus", "H100-SXM,H200,B200"],
}


def run(args: list[str]) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "turbogate", "plan", "size", *args, "--json", "--no-progress"],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out: dict[str, Any] = {"args": " ".join(args), "wall_s": round(wall, 2),
                           "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
                           "within_target": wall <= TARGET_S, "exit_code": done.returncode}
    if done.returncode != 0:
        out["error"] = done.stderr.strip()[-500:]
        return out
    answer = json.loads(done.stdout)
    out["simulations"] = answer["simulations"]
    if answer["fleets"]:
        f = answer["fleets"][0]
        out["recommended"] = {"gpu": f["gpu"], "tp": f["tp"], "replicas": f["replicas"],
                              "cost_per_hour": f["cost_per_hour"], "ttft_p95_s": f["simulated"]["ttft_p95_s"],
                              "one_fewer_misses": (f["one_fewer"] or {}).get("misses")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", action="store_true", help="Also run two more cases (other models, loads, SLOs).")
    a = ap.parse_args()
    cases = {"issue-70b-50rps": ISSUE, **(FAMILIES if a.families else {})}
    load_before = os.getloadavg()
    results = {name: run(args) for name, args in cases.items()}
    print(json.dumps({"target_s": TARGET_S, "load_average_before": [round(x, 2) for x in load_before],
                      "load_average_after": [round(x, 2) for x in os.getloadavg()], "cases": results}, indent=2))


if __name__ == "__main__":
    main()
