"""Turbo keeps its latency at 2× overload with the default config, end to end (issue 19).

Real emulators, the real gateway with a config that sets no ``max_concurrency`` and no tier
policy, and ``turbogate bench`` as the client.  Looser than ``benchmarks/turbo_isolation.py``
(shorter runs, the median rather than the p95, on a busy 2-core machine); the pure-core test
holds the tight bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from turbogate.config import hash_key
from turbogate.engine import EngineConfig
from turbogate.engine.capacity import saturated_rate
from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.procs import start_emulator, start_gateway

GPU, MODEL, SEQS = "L4", "llama-3.1-8b", 8
# Real-time emulators (time scale 1): the fleet's capacity is small (about 7 req/s), so the
# streams at 2x cost the 2-core machine little CPU and the emulators keep their modelled speed;
# at faster scales the machine itself became the bottleneck inside the whole suite.
SCALE = 1.0
PROMPT, OUTPUT = 128, 32
KEY = "sk-isolation-test"


def fleet_capacity(replicas: int) -> float:
    """Completions/s at saturation, from the emulator's own engine in virtual time."""
    dep = deployment(get_gpu(GPU), resolve_model(MODEL))
    return replicas * saturated_rate(dep, EngineConfig(max_num_seqs=SEQS), PROMPT, OUTPUT) / SCALE


def bench(url: str, qps: float, seconds: float, tiers: str, out: Path) -> list[dict[str, object]]:
    cmd = [sys.executable, "-m", "turbogate", "bench", "--host", url, "--api-key", KEY, "--model", MODEL,
           "--qps", f"{qps:.3f}", "--duration", str(seconds), "--tiers", tiers, "--random-seed", "7",
           "--prompt-tokens", str(PROMPT - 10), "--output-tokens", str(OUTPUT), "--out", str(out),
           "--no-live", "--no-report", "--drain", "60"]
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line]


def tier_ttft(records: list[dict[str, object]], tier: str, q: float) -> float:
    values = sorted(float(r["ttft_s"]) for r in records  # type: ignore[arg-type]
                    if r["tier_asked"] == tier and r["ok"] and r["ttft_s"] is not None)
    assert len(values) >= 20, len(values)
    return values[int(q * (len(values) - 1))]


def turbo_ttft(records: list[dict[str, object]], q: float) -> float:
    return tier_ttft(records, "turbo", q)


def test_turbo_holds_at_twice_capacity_with_the_default_config(tmp_path: Path) -> None:
    cap = fleet_capacity(2)
    emulators = [start_emulator("--gpu", GPU, "--model", MODEL, "--max-num-seqs", str(SEQS), "--time-scale",
                                str(SCALE), log_dir=tmp_path / "logs") for _ in range(2)]
    cfg = {"tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
           "pools": [{"name": "p", "models": [MODEL],
                      "replicas": [{"url": e.url, "engine": "emulator"} for e in emulators]}],
           "scrape": {"interval_s": 0.5}}
    (tmp_path / "gw.yaml").write_text(yaml.safe_dump(cfg))
    gateway = start_gateway(tmp_path / "gw.yaml", log_dir=tmp_path / "logs")
    mix = "turbo=0.2,standard=0.75,relax=0.05"
    try:
        light = bench(gateway.url, 0.2 * cap, 15, "turbo=1", tmp_path / "light")
        run = bench(gateway.url, 2 * cap, 26, mix, tmp_path / "heavy")
        heavy = [r for r in run if float(r["scheduled_s"]) >= 6.0]  # after the gateway learned the limits
    finally:
        gateway.stop()
        for e in emulators:
            e.stop()
    done = [r for r in heavy if r["ok"]]
    figures = {
        "capacity_rps": cap,
        "turbo_p50_light_s": turbo_ttft(light, 0.5), "turbo_p50_heavy_s": turbo_ttft(heavy, 0.5),
        "turbo_p95_light_s": turbo_ttft(light, 0.95), "turbo_p95_heavy_s": turbo_ttft(heavy, 0.95),
        "standard_p50_heavy_s": tier_ttft(heavy, "standard", 0.5),
        "turbo_shed": sum(r["tier_asked"] == "turbo" and r["status"] in (429, 503) for r in heavy),
        "standard_shed": sum(r["tier_asked"] == "standard" and r["status"] in (429, 503) for r in heavy),
        "standard_share": sum(r["tier_served"] == "standard" for r in done) / len(done),
        "relax_done": sum(r["tier_served"] == "relax" for r in done),
        # What the fleet delivered while saturated (all requests, whenever sent): far under its
        # computed capacity means the machine, not the gateway, was the bottleneck.
        "achieved_rps": sum(r["ok"] and 6.0 <= float(r["end_s"]) <= 26.0 for r in run) / 20.0,  # type: ignore[arg-type]
    }
    print(json.dumps(figures))  # shown by pytest when an assertion fails
    ratio = figures["turbo_p50_heavy_s"] / figures["turbo_p50_light_s"]
    assert ratio <= 2.5, figures
    assert figures["turbo_p50_heavy_s"] <= 0.1 * figures["standard_p50_heavy_s"], figures  # tiers, not FIFO
    assert figures["turbo_shed"] == 0, figures
    assert figures["standard_share"] >= 0.2, figures
    assert figures["relax_done"] > 0, figures
    assert figures["standard_shed"] > 0, figures  # Standard's excess is what is shed
