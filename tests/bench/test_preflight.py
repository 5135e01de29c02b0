"""A failed run exits non-zero, and what can be known before any load refuses at once (issue 42).

Real processes: an emulator, a gateway that wants a key, the bench through its CLI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.bench.test_failures import _rec
from turbogate.bench.cli import app
from turbogate.bench.failures import run_failure
from turbogate.config import hash_key
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results import load_run

KEY = "sk-preflight"
MODEL = "llama-3.2-1b"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("emu")
    emu = start_emulator("--time-scale", "0", "--model", MODEL, "--gpu", "L4", log_dir=folder)
    yield emu
    emu.stop()


@pytest.fixture(scope="module")
def gateway(emulator: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("gw")
    cfg = {"tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard"]}],
           "pools": [{"name": "p", "models": [MODEL], "replicas": [{"url": emulator.url, "engine": "emulator"}]}]}
    (folder / "gw.yaml").write_text(yaml.safe_dump(cfg))
    gw = start_gateway(folder / "gw.yaml", log_dir=folder)
    yield gw
    gw.stop()


def _one_error_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip() and "error:" in x]
    assert len(lines) == 1, stderr
    return lines[0]


def test_the_newcomers_12_s_run_without_a_key_exits_non_zero_naming_401_and_api_key(
        gateway: Service, tmp_path: Path) -> None:
    """The issue's command as typed: a model named, no --api-key, a 12 s ramp from 1 to 3 req/s."""
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["--host", gateway.url, "--model", MODEL, "--qps-start", "1", "--qps-end", "3",
                                   "--duration", "12", "--no-live", "--out", str(out)])
    assert res.exit_code != 0, res.output
    line = _one_error_line(res.stderr)
    assert "401" in line and "--api-key" in line, line
    assert not (out / "requests.jsonl").exists()  # refused before any load: GET /v1/models answered 401


def test_a_model_the_target_does_not_serve_is_refused_before_any_load(emulator: Service, tmp_path: Path) -> None:
    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["--host", emulator.url, "--model", "llama-9b", "--qps", "2", "--duration", "5",
                                   "--no-live", "--out", str(out)])
    assert res.exit_code == 2, res.output
    line = _one_error_line(res.stderr)
    assert "'llama-9b'" in line and MODEL in line and "--model" in line, line
    assert not out.exists()


def test_errors_over_the_whole_run_fail_it_when_no_step_has_five_answers(tmp_path: Path) -> None:
    """A 12 s ramp of 10 steps at 1–3 req/s: the first step holds about one request, so only the whole-run
    rule can see that 90 % of the requests failed."""
    emu = start_emulator("--time-scale", "0", "--model", MODEL, "--gpu", "L4", "--error-rate", "0.9",
                         log_dir=tmp_path / "logs")
    try:
        out = tmp_path / "r"
        res = CliRunner().invoke(app, ["--host", emu.url, "--qps-start", "1", "--qps-end", "3", "--duration", "12",
                                       "--no-live", "--out", str(out)])
    finally:
        emu.stop()
    assert res.exit_code == 1, res.output
    line = _one_error_line(res.stderr)
    assert "of the run failed" in line and "HTTP 500" in line and "--max-error-rate" in line, line
    run = load_run(out)
    assert len([r for r in run.requests if r.step == 0]) < 5  # the first-step check could not have fired
    assert any("of the run failed" in w for w in run.summary.warnings)


def test_the_whole_run_rule_counts_shedding_apart_and_names_the_cause() -> None:
    refused = [_rec(i, 401, False, "HTTP 401: no key") for i in range(3)]
    why = run_failure(refused, 0.5)
    assert why is not None and "3 of 3" in why and "HTTP 401" in why and "--api-key" in why
    shed = [_rec(i, 503, False, "HTTP 503: busy") for i in range(5)] + [_rec(9, 200, True)]
    assert run_failure(shed, 0.5) is None
    assert run_failure([_rec(0, 401, False, "HTTP 401"), _rec(1, 200, True)], 0.5) is None  # 50 % is allowed


def test_a_12_s_run_of_mostly_refused_keys_fails_as_a_whole_naming_401_and_api_key(
        gateway: Service, tmp_path: Path) -> None:
    """The first key passes the check before load; three revoked keys make ~75 % of the requests 401. No step
    of this ramp holds the 5 answers the first-step check needs: the whole-run rule ends it."""
    out = tmp_path / "r"
    keys = ["--api-key", KEY, "--api-key", "sk-revoked-1", "--api-key", "sk-revoked-2", "--api-key", "sk-revoked-3"]
    res = CliRunner().invoke(app, ["--host", gateway.url, "--model", MODEL, "--qps-start", "1", "--qps-end", "3",
                                   "--duration", "12", "--no-live", "--out", str(out), *keys])
    assert res.exit_code == 1, res.output
    line = _one_error_line(res.stderr)
    assert "of the run failed" in line and "HTTP 401" in line and "--api-key" in line, line
    run = load_run(out)
    assert len([r for r in run.requests if r.step == 0]) < 5 and not run.summary.interrupted
