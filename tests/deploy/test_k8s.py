"""Render every Kustomize overlay with ``kubectl kustomize`` and validate each object: core
kinds strictly against the Kubernetes schemas (kubernetes-validate), KEDA's ScaledObject against
the schema in deploy/k8s/schemas (its HPA behaviour against the Kubernetes HPA schema)."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.conftest import DEPLOY, tool
from turbogate.config import parse_config

K8S = DEPLOY / "k8s"
K8S_VERSION = "1.30.0"  # an older supported minor: the manifests must not need the newest API
OVERLAYS = ["single", "ha", "ha-hpa"]
KEDA_SCHEMA = json.loads((K8S / "schemas" / "keda-scaledobject-v1alpha1.json").read_text())


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = tool("kubectl", "apt-get install kubectl")
    folder = K8S / "examples" / "vllm" if overlay == "vllm" else K8S / "overlays" / overlay
    result = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def validate(doc: dict[str, Any]) -> None:
    if doc["apiVersion"].startswith("keda.sh/"):
        jsonschema.validate(doc, KEDA_SCHEMA)
        behavior = doc["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
        if behavior is not None:  # the same type as an HPA's spec.behavior: check it with that schema
            hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"},
                   "spec": {"scaleTargetRef": {"kind": "StatefulSet", "name": "x"}, "maxReplicas": 2,
                            "behavior": behavior}}
            kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
        return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any problem, unknown kinds too


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_every_object_validates(overlay: str) -> None:
    docs = render(overlay)
    kinds = sorted(d["kind"] for d in docs)
    assert {"ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget"} <= set(kinds)
    for doc in docs:
        validate(doc)


def test_example_vllm_pool_validates_and_matches_the_gateway_config() -> None:
    docs = render("vllm")
    for doc in docs:
        validate(doc)
    (sts,) = by_kind(docs, "StatefulSet")
    (svc,) = by_kind(docs, "Service")
    assert svc["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == svc["metadata"]["name"]
    config = parse_config(yaml.safe_load(by_kind(render("single"), "ConfigMap")[0]["data"]["gateway.yaml"]))
    # The gateway's replicas are this StatefulSet's stable pod names, and the autoscaler's target.
    host = f"{svc['metadata']['name']}.{sts['metadata']['namespace']}.svc"
    assert [r.url for r in config.pools[0].replicas] == [
        f"http://{sts['metadata']['name']}-{i}.{host}:8000" for i in range(len(config.pools[0].replicas))]
    target = by_kind(render("ha"), "ScaledObject")[0]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("StatefulSet", sts["metadata"]["name"])


def test_validation_can_fail() -> None:
    """A typo in a core object and in the ScaledObject are both refused."""
    docs = render("ha")
    deployment = by_kind(docs, "Deployment")[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"pth": "/ready"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    scaled = by_kind(docs, "ScaledObject")[0]
    scaled["spec"]["triggers"][0]["metadata"].pop("query")
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled)
    scaled = by_kind(render("ha"), "ScaledObject")[0]
    scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]["polices"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(scaled)


def test_gateway_pod_shape() -> None:
    for overlay, replicas in (("single", 1), ("ha", 3)):
        docs = render(overlay)
        gateway = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "turbogate")
        assert gateway["spec"]["replicas"] == replicas
        pod = gateway["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
        assert container["livenessProbe"]["httpGet"]["path"] == "/health"
        assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"]
        secret = by_kind(docs, "Secret")[0]["metadata"]["name"]
        assert container["envFrom"] == [{"secretRef": {"name": secret}}]  # generator's hashed name, rewired
        pdb = by_kind(docs, "PodDisruptionBudget")[0]
        assert pdb["spec"]["selector"]["matchLabels"] == gateway["spec"]["selector"]["matchLabels"]


def test_the_mounted_config_is_a_valid_gateway_config() -> None:
    docs = render("ha")
    config = parse_config(yaml.safe_load(by_kind(docs, "ConfigMap")[0]["data"]["gateway.yaml"]))
    env_keys = {r.api_key_env for p in config.pools for r in p.replicas}
    secret_keys = set(by_kind(docs, "Secret")[0]["data"])
    assert env_keys <= secret_keys  # every api_key_env the config names comes from the Secret
    # The autoscalers may grow the engine StatefulSet up to the replicas the gateway knows.
    scaled = by_kind(docs, "ScaledObject")[0]
    (pool,) = config.pools
    assert scaled["spec"]["maxReplicaCount"] == len(pool.replicas)
    assert by_kind(render("ha-hpa"), "HorizontalPodAutoscaler")[0]["spec"]["maxReplicas"] == len(pool.replicas)
    assert by_kind(docs, "Deployment")[1]["metadata"]["name"] == "turbogate-redis"


def test_autoscaling_queries_name_recorded_rules() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "turbogate-rules.yaml").read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    scaled = by_kind(render("ha"), "ScaledObject")[0]
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    assert set(re.findall(r"turbogate:[a-z0-9_:]+", query)) == {"turbogate:pool_desired_replicas"} <= recorded
    hpa = by_kind(render("ha-hpa"), "HorizontalPodAutoscaler")[0]
    assert hpa["spec"]["metrics"][0]["external"]["metric"]["name"] == "turbogate_pool_desired_replicas"
