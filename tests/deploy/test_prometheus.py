"""Prometheus rules: ``promtool check rules`` and ``promtool test rules`` (the unit tests of every
alert in deploy/prometheus/turbogate-rules.test.yaml), and a real ``prometheus`` that scrapes a
real gateway and evaluates the recording rules, queried through its HTTP API."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, _get, get, tool
from tests.gateway.conftest import wait_for
from turbogate.procs import Service, free_port

RULES = DEPLOY / "prometheus" / "turbogate-rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "turbogate-rules.test.yaml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool", "apt-get install prometheus"), *args], capture_output=True, text=True,
                          timeout=120)


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_every_alert_has_a_unit_test() -> None:
    rules = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {a["alertname"] for t in tests for a in t.get("alert_rule_test", []) if a["exp_alerts"]}
    assert alerts == fired


def test_unit_tests_catch_a_changed_threshold(tmp_path: Path) -> None:
    """The unit tests can fail: with the Turbo SLO raised to 1 s the TTFT alert no longer fires."""
    (tmp_path / RULES.name).write_text(RULES.read_text().replace('{tier="turbo"} > 0.5', '{tier="turbo"} > 1'))
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    result = promtool("test", "rules", str(tmp_path / RULE_TESTS.name))
    assert result.returncode != 0 and "TurbogateTurboTTFTOverSLO" in result.stdout + result.stderr


@pytest.fixture
def prometheus(live: tuple[Service, Service], tmp_path: Path) -> Iterator[str]:
    binary = tool("prometheus", "apt-get install prometheus")
    gateway, _ = live
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(RULES)],
              "scrape_configs": [{"job_name": "turbogate", "static_configs": [{"targets": [gateway.url[7:]]}]}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is not None or _get(url + "/-/ready")[0] == 200, timeout=60,
                 what="prometheus ready")
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def instant(url: str, query: str) -> list[dict[str, Any]]:
    body = json.loads(get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": time.time()})))
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_real_prometheus_scrapes_the_gateway_and_records(prometheus: str) -> None:
    """The recording rules evaluate on a real gateway's metrics: one healthy replica in pool p."""
    found: list[dict[str, Any]] = []

    def recorded() -> bool:
        found[:] = instant(prometheus, "turbogate:pool_healthy_replicas")
        return bool(found)

    wait_for(recorded, timeout=60, what="turbogate:pool_healthy_replicas recorded")
    assert [(r["metric"], float(r["value"][1])) for r in found] == [
        ({"__name__": "turbogate:pool_healthy_replicas", "pool": "p"}, 1.0)]
    assert [float(r["value"][1]) for r in instant(prometheus, 'up{job="turbogate"}')] == [1.0]
    # The rule files loaded as written: every group, every rule, no evaluation error.
    rules = json.loads(get(prometheus + "/api/v1/rules"))["data"]["groups"]
    assert sorted(g["name"] for g in rules) == ["turbogate.alerts", "turbogate.recording"]
    assert all(r["health"] != "err" for g in rules for r in g["rules"]), rules
