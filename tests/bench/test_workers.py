"""``bench --workers N`` against a real emulator: one schedule, split and merged back whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from turbogate.bench.arrivals import Scheduled
from turbogate.bench.workers import merge, split
from turbogate.procs import Service
from turbogate.results.schema import RequestRecord


def _bench(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "turbogate", "bench", "--host", url, "--shape", "linear", "--qps-start", "10",
           "--qps-end", "30", "--steps", "2", "--duration", "3", "--prompt-tokens", "32", "--output-tokens", "4",
           "--random-seed", "11", "--out", str(out), "--no-live", "--no-report", "--drain", "30", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def _records(run: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in (run / "requests.jsonl").read_bytes().splitlines() if line.strip()]


def test_two_workers_send_the_same_schedule_as_one(fast_emulator: Service, tmp_path: Path) -> None:
    one = _bench(fast_emulator.url, tmp_path / "one")
    two = _bench(fast_emulator.url, tmp_path / "two", "--workers", "2")
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    a, b = _records(tmp_path / "one"), _records(tmp_path / "two")
    # The same seeded schedule: the same send times, steps and tiers, every request answered once.
    assert sorted((r["scheduled_s"], r["step"]) for r in a) == sorted((r["scheduled_s"], r["step"]) for r in b)
    assert len({r["id"] for r in b}) == len(b)
    assert all(r["ok"] for r in b)
    summary = orjson.loads((tmp_path / "two" / "summary.json").read_bytes())
    assert summary["config"]["workers"] == 2
    lag_lines = [n for n in summary["notes"] if n.startswith("worker ")]
    assert len(lag_lines) == 2 and all("p99 dispatch lag" in n for n in lag_lines)
    # Both workers sent about half: the slices interleave.
    counts = sorted(int(n.split()[2]) for n in lag_lines)
    assert counts[1] - counts[0] <= 1 and sum(counts) == len(b)


def test_workers_refuse_find_knee(fast_emulator: Service, tmp_path: Path) -> None:
    res = _bench(fast_emulator.url, tmp_path / "k", "--workers", "2", "--find-knee")
    assert res.returncode == 2
    assert "--workers" in res.stderr and "--find-knee" in res.stderr


def _item(t: float) -> Scheduled:
    return Scheduled(t=t, step=0, offered_rps=1.0, spec=None)  # type: ignore[arg-type]


def test_split_is_disjoint_and_whole() -> None:
    schedule = [_item(i / 10) for i in range(11)]
    parts = split(schedule, 3)
    assert [len(p) for p in parts] == [4, 4, 3]
    assert sorted(x.t for p in parts for x in p) == [x.t for x in schedule]


def test_merge_orders_by_schedule_and_renumbers() -> None:
    def rec(rid: int, t: float) -> RequestRecord:
        return RequestRecord(id=rid, step=0, offered_rps=1.0, scheduled_s=t, sent_s=t, dispatch_lag_s=0.0,
                             queue_s=0.0, end_s=t + 1, tier_asked=None, tier_served=None, status=200, ok=True,
                             error=None, ttft_s=0.1, itl_s=(), tpot_s=None, e2e_s=1.0, prompt_tokens=1,
                             output_tokens=1)

    merged = merge([[rec(0, 0.0), rec(1, 0.2)], [rec(0, 0.1)]])
    assert [r.scheduled_s for r in merged] == [0.0, 0.1, 0.2]
    assert [r.id for r in merged] == [0, 1, 2]


def test_workers_on_a_local_ray_instance_send_the_whole_schedule(fast_emulator: Service, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install 'turbogate[ray]')")
    one = _bench(fast_emulator.url, tmp_path / "one")
    ray = _bench(fast_emulator.url, tmp_path / "ray", "--workers", "2", "--ray", "local")
    assert one.returncode == 0, one.stderr
    assert ray.returncode == 0, ray.stderr
    a, b = _records(tmp_path / "one"), _records(tmp_path / "ray")
    assert sorted(r["scheduled_s"] for r in a) == sorted(r["scheduled_s"] for r in b)
    assert all(r["ok"] for r in b)
    summary = orjson.loads((tmp_path / "ray" / "summary.json").read_bytes())
    assert summary["config"]["ray"] == "local"
    assert len([n for n in summary["notes"] if n.startswith("worker ")]) == 2


def test_ray_needs_workers(fast_emulator: Service, tmp_path: Path) -> None:
    res = _bench(fast_emulator.url, tmp_path / "r", "--ray", "local")
    assert res.returncode == 2 and "--workers" in res.stderr
