"""schemathesis over the live gateway's ``/openapi.json`` with its conformance checks (issue 43):
every answer's status, content type, headers and body match what the document says, a method
the document does not list gets 405 with an ``Allow`` naming exactly the listed ones, and
nothing answers 500.  The CLI (``st run``) runs as a user would run it; its JUnit report is read
for failures (a schemathesis-internal error is reported apart, not as a conformance failure).

``--checks`` leaves out the data checks (positive_data_acceptance, negative_data_rejection):
the request schemas describe what the gateway itself checks, and other fields pass through to
the engine, which may refuse them (openapi.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.gateway.conftest import ADMIN, KEY, MODEL, gateway_config, pool
from turbogate.procs import Service, start_emulator, start_gateway

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
          "response_schema_conformance,unsupported_method,allow_header_conformance,missing_required_header")
EXAMPLES = int(30 * float(os.environ.get("TURBOGATE_FUZZ_SCALE", "1")))


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    logs = tmp_path_factory.mktemp("st")
    emu = start_emulator("--time-scale", "0", "--model", MODEL, log_dir=logs)
    config = logs / "gw.yaml"
    config.write_text(yaml.safe_dump(gateway_config(
        [pool("main", [MODEL], [emu.url], max_concurrency=64, knee_rps=1000.0)],
        limits={"max_tokens": 2048, "header_timeout_s": 5.0, "body_timeout_s": 5.0})))
    try:
        with start_gateway(config, "--log-level", "warning", log_dir=logs) as gateway:
            yield gateway
    finally:
        emu.stop()


def _run(gw: Service, tmp: Path, token: str, paths: str, exclude: bool, checks: str = CHECKS) -> tuple[list[str], int]:
    report = tmp / "junit.xml"
    st = Path(sys.executable).with_name("st")
    out = subprocess.run(
        [str(st), "run", gw.url + "/openapi.json", "-H", f"Authorization: Bearer {token}",
         "--exclude-path-regex" if exclude else "--include-path-regex", paths, "-n", str(EXAMPLES),
         "--checks", checks, "--phases", "examples,coverage,fuzzing", "-w", "1", "--no-color", "--seed", "43",
         "--request-timeout", "10", "--report", "junit", "--report-junit-path", str(report)],
        capture_output=True, text=True, timeout=540, cwd=tmp)  # (its .schemathesis/ cache goes there)
    assert report.exists(), out.stdout[-3000:] + out.stderr[-2000:]
    failures = []
    cases = 0
    for case in ET.parse(report).getroot().iter("testcase"):
        cases += 1
        for failure in case.iter("failure"):
            failures.append(f"{case.get('name')}: {failure.get('message') or ''}\n{(failure.text or '')[:1500]}")
    return failures, cases


def test_schemathesis_reports_no_conformance_failure(gw: Service, tmp_path: Path) -> None:
    (tmp_path / "api").mkdir()
    (tmp_path / "admin").mkdir()
    api, api_ops = _run(gw, tmp_path / "api", KEY, "^/admin", exclude=True)
    admin, admin_ops = _run(gw, tmp_path / "admin", ADMIN, "^/admin", exclude=False)
    print(f"\nschemathesis: {api_ops} API and {admin_ops} admin operations, {len(api) + len(admin)} failures")
    assert api_ops >= 10 and admin_ops >= 8  # every operation was run
    assert not api and not admin, "\n\n".join((api + admin)[:5])
