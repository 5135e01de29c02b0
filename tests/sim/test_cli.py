"""``turbogate sim`` end to end through its CLI: run folders, sweeps, policy tables, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.sim.helpers import KEY, gateway_data
from turbogate.cli import app
from turbogate.results import ALL, load_run
from turbogate.results.io import REQUESTS, REQUESTS_GZ
from turbogate.sim.sweep import parse_sweep

LOAD = ["--prompt-tokens", "128", "--output-tokens", "48", "--tiers", "turbo=0.2,standard=0.8", "--api-key", KEY,
        "--no-progress", "--no-report"]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    gw, fl = tmp_path / "gateway.yaml", tmp_path / "fleet.yaml"
    gw.write_text(yaml.safe_dump(gateway_data()))
    fl.write_text(yaml.safe_dump({"pools": [{"name": "p", "replicas": [
        {"count": 2, "gpu": "L4", "model": "llama-3.1-8b", "max_num_seqs": 8}]}]}))
    return gw, fl


def _sim(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["sim", *args])
    return r.exit_code, r.output


def test_writes_a_run_folder_bench_compare_reads(files: tuple[Path, Path], tmp_path: Path) -> None:
    gw, fl = files
    out = tmp_path / "run"
    code, text = _sim("--config", str(gw), "--fleet", str(fl), "--qps-start", "1", "--qps-end", "9", "--steps", "3",
                      "--duration", "30", "--out", str(out), *LOAD)
    assert code == 0, text
    assert "knee" in text
    run = load_run(out)
    assert run.kind == "sim" and len(run.summary.steps) == 3 and run.requests
    assert run.summary.config["warmup_s"] == 0.0  # a single run meets a fresh gateway, as bench does
    code, text = CliRunner().invoke(app, ["bench", "compare", str(out), str(out)]).exit_code, ""
    assert code == 0


def test_sweep_runs_points_in_processes_and_finds_the_knee(files: tuple[Path, Path], tmp_path: Path) -> None:
    gw, fl = files
    out = tmp_path / "sweep"
    code, text = _sim("--config", str(gw), "--fleet", str(fl), "--sweep", "qps=1:13:3", "--jobs", "2",
                      "--duration", "30", "--out", str(out), *LOAD)
    assert code == 0, text
    points = ("1", "4", "7", "10", "13")  # the fleet's capacity is about 4.9 req/s
    for q in points:
        point = load_run(out / "points" / f"qps-{q}", with_requests=False).summary
        assert point.kind == "sim" and point.config["warmup_s"] == 30.0  # each point starts warm
    combined = load_run(out)
    assert [s.step.index for s in combined.summary.steps] == [0, 1, 2, 3, 4]
    assert [round(r.offered_rps) for r in combined.requests[:1]] == [1]
    knee = combined.summary.knee()
    assert knee is not None and 1 < knee < 10, combined.summary.knees  # between the first and last points
    per_point = [load_run(out / "points" / f"qps-{q}", with_requests=False).summary for q in points]
    assert len(combined.requests) == sum(s.steps[0].tiers[ALL].requests for s in per_point)
    # The records once, compressed: the combined folder's, none in the points' (docs/sim.md, "Output size").
    assert (out / REQUESTS_GZ).is_file() and not (out / REQUESTS).exists()
    assert not any((out / "points" / f"qps-{q}" / name).exists() for q in points for name in (REQUESTS, REQUESTS_GZ))
    with pytest.raises(FileNotFoundError, match="--full-records"):
        load_run(out / "points" / "qps-1")


def test_full_records_writes_plain_records_and_each_points_own(files: tuple[Path, Path], tmp_path: Path) -> None:
    gw, fl = files
    out = tmp_path / "full"
    code, text = _sim("--config", str(gw), "--fleet", str(fl), "--sweep", "qps=1:4:3", "--jobs", "1",
                      "--duration", "10", "--warmup", "0", "--full-records", "--out", str(out), *LOAD)
    assert code == 0, text
    assert (out / REQUESTS).is_file() and not (out / REQUESTS_GZ).exists()
    combined = load_run(out).requests
    assert len(combined) == sum(len(load_run(out / "points" / f"qps-{q}").requests) for q in ("1", "4"))
    # The same command without the flag writes the same records, compressed (the reader does not care).
    code, text = _sim("--config", str(gw), "--fleet", str(fl), "--sweep", "qps=1:4:3", "--jobs", "1",
                      "--duration", "10", "--warmup", "0", "--out", str(out), *LOAD)
    assert code == 0, text
    assert (out / REQUESTS_GZ).is_file() and not (out / REQUESTS).exists()
    assert load_run(out).requests == combined


def test_compare_policies_writes_one_table_per_load_level(files: tuple[Path, Path], tmp_path: Path) -> None:
    gw, fl = files
    out = tmp_path / "policies"
    code, text = _sim("--config", str(gw), "--fleet", str(fl), "--qps", "6", "--duration", "20",
                      "--compare-policies", "--jobs", "2", "--out", str(out), *LOAD)
    assert code == 0, text
    rows = json.loads((out / "baselines.json").read_text())
    assert sorted(r["policy"] for r in rows) == sorted(["turbogate", "fifo", "round-robin", "least-outstanding",
                                                        "phase-aware"])
    assert all(r["turbo_p95_ttft_s"] is not None for r in rows)
    assert "Turbo p95 TTFT" in text and (out / "fifo" / "summary.json").is_file()
    assert (out / "baselines.md").read_text().count("| turbogate |") == 1


@pytest.mark.parametrize(("fleet", "field"), [
    ({"pools": [{"name": "nope", "replicas": [{"gpu": "L4", "model": "llama-3.1-8b"}]}]}, "pools.0.name"),
    ({"pools": [{"name": "p", "replicas": [{"gpu": "Z80", "model": "llama-3.1-8b"}]}]}, "pools.0.replicas.0"),
    ({"pools": [{"name": "p", "replicas": [{"gpu": "L4", "model": "llama-3.1-8b", "tp": 0}]}]}, "tp"),
])
def test_a_bad_fleet_is_refused_naming_the_field(files: tuple[Path, Path], fleet: object, field: str) -> None:
    gw, fl = files
    fl.write_text(yaml.safe_dump(fleet))
    code, text = _sim("--config", str(gw), "--fleet", str(fl), "--qps", "1", "--duration", "5", *LOAD)
    flat = "".join(c for c in text if c not in "│\n ")  # Rich wraps the message in a box
    assert code == 2 and field in flat


def test_bad_flags_are_refused(files: tuple[Path, Path]) -> None:
    gw, fl = files
    for extra, word in ((["--policy", "lifo"], "--policy"), (["--sweep", "rate=1:2:1"], "--sweep")):
        code, text = _sim("--config", str(gw), "--fleet", str(fl), "--qps", "1", *extra, *LOAD)
        assert code == 2 and word in text


@pytest.mark.parametrize(("spec", "points"), [("qps=10:50:10", [10, 20, 30, 40, 50]), ("qps=0.5:1.4:0.3",
                                                                                      [0.5, 0.8, 1.1, 1.4])])
def test_parse_sweep(spec: str, points: list[float]) -> None:
    assert parse_sweep(spec) == pytest.approx(points)
