"""Through the gateway: tier mix asked and served, Server-Timing, queue depth; and `turbogate demo`."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tests.bench.test_emulator import _recompute
from turbogate.bench.cli import app
from turbogate.config import hash_key
from turbogate.procs import Service, start_gateway
from turbogate.results import load_run

KEY = "sk-bench-test"


def _port_closed(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


def test_bench_through_gateway_records_tiers(emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    emus = [emulator_factory("--time-scale", "0.05", "--gpu", "L4", "--model", "llama-3.1-8b", "--max-num-seqs", "8")
            for _ in range(2)]
    cfg = {
        "tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "p", "models": ["llama-3.1-8b"],
                   "replicas": [{"url": e.url, "engine": "emulator", "max_concurrency": 8} for e in emus]}],
        "scrape": {"interval_s": 0.2, "stale_after_s": 3.0, "timeout_s": 1.0},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    gw = start_gateway(path, log_dir=tmp_path / "logs")
    try:
        out = tmp_path / "run"
        res = CliRunner().invoke(app, [
            "--host", gw.url, "--api-key", KEY, "--tiers", "turbo=0.3,standard=0.5,relax=0.2", "--tier-via", "header",
            "--qps", "15", "--duration", "4", "--prompt-tokens", "64", "--output-tokens", "16",
            "--scrape", gw.url + "/metrics", "--no-live", "--out", str(out)])
        assert res.exit_code == 0, res.output
    finally:
        gw.stop()
    run = load_run(out)
    pairs = Counter((r.tier_asked, r.tier_served) for r in run.requests if r.ok)
    assert set(pairs) == {("turbo", "turbo"), ("standard", "standard"), ("relax", "relax")}, pairs
    assert all(r.server_timing_ms and "l1" in r.server_timing_ms for r in run.requests if r.ok)
    assert {"turbo", "standard", "relax", "all"} <= set(run.summary.overall)
    depth = [s for s in run.samples if s.name == "turbogate_queue_depth"]
    assert {s.labels["tier"] for s in depth} >= {"turbo", "standard", "relax"}
    # The replicas were discovered behind the gateway and scraped: KV use and fragmentation per engine.
    engines = {e.url + "/metrics" for e in emus}
    for name in ("turbogate_emulator_kv_fragmentation", "vllm:kv_cache_usage_perc"):
        assert {s.source for s in run.samples if s.name == name} == engines, name
    assert any("2 replicas" in n for n in run.summary.notes)
    _recompute(out)


def test_demo_runs_past_the_knee_and_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "turbogate", "demo", "--no-live", "--out", str(out)],
                          capture_output=True, text=True, timeout=240,
                          env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "sim (" in text and "fleet knee ≈" in text and "ROI by load band" in text and "Recommendation:" in text
    assert "Turbo band:" in text and "machine: " in text
    run = load_run(out)
    assert len(run.summary.steps) == 5 and "machine" in run.summary.config
    offered = sorted(st.offered_rps for st in run.summary.steps)
    machine = run.summary.config["machine"]
    if not machine["saturated_first"]:  # the fleet was measured: the demo concludes
        assert "Inconclusive" not in text, text
        assert "Turbo holds through" in text or "where Turbo itself degrades" in text, text
        assert offered[1] < run.summary.knees["all"].value < offered[-1]
    else:
        assert "bounded by this machine" in text and "No fleet recommendation" in text
    assert {r.tier_served for r in run.requests if r.ok} == {"turbo", "standard"}
    assert (out / "report.html").is_file() and (out / "gateway.yaml").is_file()
    # Every child process is gone: the ports the demo printed are closed again.
    urls = [w.rstrip(",;") for line in text.splitlines() if line.startswith("replicas")
            for w in line.split() if w.startswith("http://")]
    assert len(urls) == 3
    assert all(_port_closed(u) for u in urls)
    _recompute(out)
