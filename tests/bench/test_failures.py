"""Failing loudly: a run whose requests fail stops, says why and exits non-zero; a lagging bench says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from turbogate.bench.cli import app
from turbogate.bench.failures import first_step_failure, reasons, reasons_line
from turbogate.config import hash_key
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results import RequestRecord, load_run

KEY = "sk-fail-loudly"
MODEL = "llama-3.2-1b"
# The first key passes the check before load (GET /v1/models); the three others are refused.
MOSTLY_REVOKED = ["--api-key", KEY, "--api-key", "sk-revoked-1", "--api-key", "sk-revoked-2",
                  "--api-key", "sk-revoked-3"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A gateway that wants a key, before an instant emulator."""
    folder = tmp_path_factory.mktemp("fail")
    emu = start_emulator("--time-scale", "0", "--model", MODEL, "--gpu", "L4", log_dir=folder / "logs")
    cfg = {"tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard"]}],
           "pools": [{"name": "p", "models": [MODEL], "replicas": [{"url": emu.url, "engine": "emulator"}]}]}
    (folder / "gw.yaml").write_text(yaml.safe_dump(cfg))
    gw = start_gateway(folder / "gw.yaml", log_dir=folder / "logs")
    yield gw
    gw.stop()
    emu.stop()


def test_model_discovery_without_a_key_says_pass_api_key(gateway: Service, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["--host", gateway.url, "--qps", "5", "--duration", "1", "--no-live",
                                   "--out", str(tmp_path / "r")])
    assert res.exit_code == 2  # refused before any load, as bad input
    assert "401" in res.output and "--api-key" in res.output and "pass --model" not in res.output


def test_a_mostly_401_run_stops_names_the_cause_and_exits_non_zero(gateway: Service, tmp_path: Path) -> None:
    out = tmp_path / "r"
    keys = MOSTLY_REVOKED
    res = CliRunner().invoke(app, ["--host", gateway.url, "--model", MODEL, "--qps-start", "5", "--qps-end", "20",
                                   "--duration", "20", "--no-live", "--out", str(out), *keys], env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert "HTTP 401 ×" in res.output  # the reasons by count, on the terminal
    assert "stopped:" in res.output and "pass --api-key" in res.output
    run = load_run(out)
    assert run.summary.interrupted and max(r.scheduled_s for r in run.requests if r.sent_s is not None) < 10
    assert run.summary.knees["all"].value is None  # a broken run is not a saturated one
    assert any("401" in w and "--api-key" in w for w in run.summary.warnings)
    assert "Fleet knee" not in run.summary.recommendation


def test_a_lagging_bench_says_so_in_the_summary(gateway: Service, tmp_path: Path) -> None:
    # Any real dispatch lag exceeds a 1 µs bound: the warning path end to end, not a timing claim.
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["--host", gateway.url, "--api-key", KEY, "--qps", "20", "--duration", "2",
                                   "--max-lag-ms", "0.001", "--no-live", "--out", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "load generator was the bottleneck" in res.output
    summary = load_run(out, with_requests=False, with_samples=False).summary
    assert any("load generator was the bottleneck" in w for w in summary.warnings)
    html = (out / "report.html").read_text()
    assert "load generator was the bottleneck" in html


def _rec(i: int, status: int | None, ok: bool, error: str | None = None) -> RequestRecord:
    return RequestRecord(id=i, step=0, offered_rps=1.0, scheduled_s=float(i), sent_s=float(i), dispatch_lag_s=0.0,
                         queue_s=0.0, end_s=i + 0.1, tier_asked=None, tier_served=None, status=status, ok=ok,
                         error=error, ttft_s=None, itl_s=(), tpot_s=None, e2e_s=None, prompt_tokens=None,
                         output_tokens=None)


def test_first_step_rule_counts_shedding_apart() -> None:
    shed = [_rec(i, 429, False, "HTTP 429: busy") for i in range(8)] + [_rec(9, 200, True)]
    assert first_step_failure(shed, 0, 0.5) is None  # the target saying it is busy is data, not failure
    broken = [_rec(i, 401, False, "HTTP 401: no key") for i in range(8)] + [_rec(9, 200, True)]
    why = first_step_failure(broken, 0, 0.5)
    assert why is not None and "8 of 9" in why and "HTTP 401 ×8" in why and "--api-key" in why
    unfinished = [_rec(i, None, False, "unfinished: still running") for i in range(8)]
    assert first_step_failure(unfinished, 0, 0.5) is None and not reasons(unfinished)
    mixed = [_rec(1, None, False, "ClientConnectorError: refused"), _rec(2, 500, False, "HTTP 500: x")]
    assert reasons_line(reasons(mixed)) in ("connection refused ×1, HTTP 500 ×1", "HTTP 500 ×1, connection refused ×1")


def test_find_knee_stops_on_a_failing_first_probe(gateway: Service, tmp_path: Path) -> None:
    keys = MOSTLY_REVOKED
    res = CliRunner().invoke(app, ["--host", gateway.url, "--model", MODEL, "--find-knee", "--qps-start", "10",
                                   "--step-duration", "1", "--no-live", "--no-report", "--out", str(tmp_path / "r"),
                                   *keys], env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert "HTTP 401" in res.output and "--api-key" in res.output
    assert len(load_run(tmp_path / "r", with_samples=False).summary.steps) == 1  # no second probe
