"""Capture → replay through real processes: a gateway serves a bench run, its usage is exported as a
trace, the trace is replayed through the gateway and exported again.

The replay sends every request at its recorded offset (to well under a millisecond: the schedule is
the trace's) with the recorded prompt and output token counts, which the engine then reports
exactly; the second capture holds the same requests (tenant, tier, tokens) as the first.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from turbogate.bench.cli import app as bench_app
from turbogate.config import hash_key
from turbogate.procs import Service, start_gateway
from turbogate.results import load_run
from turbogate.trace.cli import app as trace_app
from turbogate.trace.format import Trace
from turbogate.trace.importers import load_trace

KEYS = {"acme": "sk-trace-acme", "beta": "sk-trace-beta"}
ADMIN = "trace-admin-token"
MODEL = "llama-3.1-8b"


def _export(out: Path, *args: str) -> Trace:
    res = CliRunner().invoke(trace_app, ["export", "-o", str(out), *args])
    assert res.exit_code == 0, res.output
    return load_trace(out)


def _requests(trace: Trace) -> Counter[tuple[object, ...]]:
    return Counter((r.tenant, r.tier_asked, r.tier_served, r.model, r.status, r.prompt_tokens, r.output_tokens)
                   for r in trace.requests)


@pytest.mark.slow
def test_capture_replay_capture(emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    emu = emulator_factory("--time-scale", "0.05", "--gpu", "L4", "--model", MODEL, "--max-num-seqs", "16")
    cfg = {
        "admin": {"token_sha256": hash_key(ADMIN)},
        "tenants": [{"name": t, "key_sha256": hash_key(k), "tiers": ["turbo", "standard", "relax"]}
                    for t, k in KEYS.items()],
        "pools": [{"name": "p", "models": [MODEL],
                   "replicas": [{"url": emu.url, "engine": "emulator", "max_concurrency": 16}]}],
        "scrape": {"interval_s": 0.2, "stale_after_s": 3.0, "timeout_s": 1.0},
        "store": {"kind": "sqlite", "path": str(tmp_path / "state.sqlite3"), "buffer_dir": str(tmp_path / "buf")},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    gw = start_gateway(path, log_dir=tmp_path / "logs")
    keys = [a for k in KEYS.values() for a in ("--api-key", k)]
    common = ["--host", gw.url, "--model", MODEL, *keys, "--tier-via", "header", "--no-live", "--no-report",
              "--drain", "60"]
    try:
        before = time.time()
        first = tmp_path / "first"
        res = CliRunner().invoke(bench_app, [*common, "--qps", "12", "--duration", "3", "--prompt-tokens",
                                             "60:30:1:200", "--output-tokens", "8:4:1:20", "--tiers",
                                             "turbo=0.3,standard=0.5,relax=0.2", "--out", str(first)])
        assert res.exit_code == 0, res.output
        captured = _export(tmp_path / "captured.jsonl", "--gateway", gw.url, "--admin-token", ADMIN,
                           "--since", repr(before))
        # The same records read straight from the gateway's SQLite store.
        from_store = _export(tmp_path / "from-store.jsonl", "--config", str(path), "--since", repr(before))
        sent = load_run(first).requests
        assert len(captured.requests) == len(sent) > 20
        assert _requests(from_store) == _requests(captured)
        assert {r.tenant for r in captured.requests} == set(KEYS)
        assert all(r.status == 200 and r.model == MODEL for r in captured.requests)
        assert Counter((r.tier_asked, r.prompt_tokens, r.output_tokens) for r in captured.requests) == Counter(
            (r.tier_asked, r.prompt_tokens, r.output_tokens) for r in sent)

        between = time.time()
        replayed = tmp_path / "replayed"
        res = CliRunner().invoke(bench_app, [*common, "--trace", str(tmp_path / "captured.jsonl"), "--out",
                                             str(replayed)])
        assert res.exit_code == 0, res.output
        again = _export(tmp_path / "again.jsonl", "--gateway", gw.url, "--admin-token", ADMIN,
                        "--since", repr(between))
    finally:
        gw.stop()
    records = load_run(replayed).requests
    assert len(records) == len(captured.requests)
    for rec, req in zip(records, captured.requests, strict=True):  # records in schedule (= trace) order
        assert abs(rec.scheduled_s - req.t) < 0.001
        assert rec.ok and (rec.prompt_tokens, rec.output_tokens) == (req.prompt_tokens, req.output_tokens)
        assert rec.tier_asked == req.tier_asked
    # Captured again at the gateway: the same requests, tenant by tenant, token for token.
    assert _requests(again) == _requests(captured)
    lag = sorted(abs(r.dispatch_lag_s) for r in records)
    print(f"replay dispatch lag p50 {lag[len(lag) // 2] * 1000:.2f} ms, max {lag[-1] * 1000:.2f} ms; "
          f"re-captured offsets vs captured: max "
          f"{max(abs(a.t - b.t) for a, b in zip(again.requests, captured.requests, strict=True)) * 1000:.2f} ms")
