"""The Grafana dashboard: built from code (grafana-foundation-sdk) and committed in sync, sane
as a dashboard, and every query names metrics a live gateway (or its engine) really exports."""

from __future__ import annotations

import importlib.util
import json
import re
from types import ModuleType
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.conftest import DEPLOY, get
from turbogate.procs import Service

GRAFANA = DEPLOY / "grafana"
BOARD: dict[str, Any] = json.loads((GRAFANA / "turbogate.json").read_text())
PANELS = [p for p in BOARD["panels"] if p["type"] != "row"]
NAME = re.compile(r"\b(?:turbogate_[a-z_]+|vllm:[a-z_:]+)\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def generator() -> ModuleType:
    pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk is in the dev extra")
    spec = importlib.util.spec_from_file_location("turbogate_dashboard", GRAFANA / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_json_is_what_the_code_builds() -> None:
    assert generator().render() == (GRAFANA / "turbogate.json").read_text(), \
        "regenerate: python deploy/grafana/dashboard.py > deploy/grafana/turbogate.json"


def test_dashboard_is_sane() -> None:
    ids = [p["id"] for p in BOARD["panels"]]
    assert len(ids) == len(set(ids)) and BOARD["uid"] and BOARD["schemaVersion"] >= 36
    variables = {v["name"] for v in BOARD["templating"]["list"]}
    assert variables == {"datasource", "pool"}
    for panel in PANELS:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\$(?!__)(\w+)", target["expr"]))
            assert used <= variables, (panel["title"], used)
    titles = " ".join(p["title"] for p in PANELS)
    for topic in ("TTFT", "Queue time", "Shed", "band", "KV", "Scale-out"):
        assert topic in titles


def exported(metrics_text: str) -> dict[str, set[str]]:
    """Sample names a /metrics page exports (a family with no samples yet still counts, by its
    type's suffixes), each with the label names seen on it."""
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics_text):
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.setdefault(family.name + suffix, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_every_query_names_an_exported_metric(live: tuple[Service, Service]) -> None:
    gateway, emulator = live
    names = exported(get(gateway.url + "/metrics").decode()) | exported(get(emulator.url + "/metrics").decode())
    queries = [t["expr"] for p in PANELS for t in p["targets"]]
    queries += [v["query"] for v in BOARD["templating"]["list"] if v["type"] == "query"]
    assert len(queries) >= 15
    for expr in queries:
        metrics = NAME.findall(expr)
        assert metrics, f"no metric named in {expr}"
        for metric in metrics:
            assert metric in names, f"{metric} (in {expr}) is not exported"
            # Labels the query groups by must be on the metric, where it has samples to tell.
            labels = names[metric]
            for group in re.findall(r"by \(([^)]*)\)", expr):
                wanted = {g.strip() for g in group.split(",")} - {"le", "instance"}
                assert not labels or wanted <= labels, f"{expr}: {wanted - labels} not labels of {metric}"
