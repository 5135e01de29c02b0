"""Config validation, the example file, the schema file, and the serve CLI's refusal of bad configs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from turbogate.config import hash_key, json_schema, load_config, parse_config
from turbogate.configpolicy import coalesce_policy
from turbogate.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def minimal(**overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "tenants": [{"name": "a", "key_sha256": hash_key("k")}],
        "pools": [{"name": "p", "models": ["m"], "replicas": [{"url": "http://127.0.0.1:9/v1/"}]}],
    }
    cfg.update(overrides)
    return cfg


def test_minimal_config_gets_defaults() -> None:
    cfg = parse_config(minimal())
    assert set(cfg.tiers) == {"turbo", "standard", "relax"}
    assert cfg.tiers["standard"].max_utilization < 1.0  # holdback on by default
    assert cfg.pools[0].replicas[0].url == "http://127.0.0.1:9"  # /v1 and slash stripped


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"tiers": {"turbo": {"weight": 4}}}, "'weight' was removed"),
        ({"aging_s": 10}, "'aging_s' was removed"),
        ({"tiers": {"standard": {"min_share": 1.5}}}, "tiers.standard.min_share"),
        ({"tiers": {"gold": {"deadline_s": 1}}}, "tiers.gold"),
        ({"tenants": [{"name": "a", "key_sha256": "not-a-hash"}]}, "tenants.0.key_sha256.0"),
        ({"tenants": [{"name": "a", "key_sha256": hash_key("k"), "tiers": ["relax"], "default_tier": "standard"}]},
         "default_tier"),
        ({"pools": [{"name": "p", "models": ["m"], "replicas": [{"url": "ftp://x"}]}]}, "pools.0.replicas.0.url"),
        ({"pools": [{"name": "p", "models": ["m"], "replicas": [{"url": "http://x", "engine": "magic"}]}]},
         "pools.0.replicas.0.engine"),
        ({"tenants": []}, "tenants"),
        ({"listen": {"port": 70000}}, "listen.port"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_config_names_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(**overrides))
    assert field in str(info.value)


def test_a_model_in_two_pools_is_l3s_choice() -> None:
    pools = [{"name": n, "models": ["m"], "region": n, "replicas": [{"url": "http://x"}]} for n in ("eu", "us")]
    cfg = parse_config(minimal(pools=pools, regions={"rtt_ms": {"eu": {"eu": 5, "us": 80}}}))
    assert [p.region for p in cfg.pools] == ["eu", "us"]
    with pytest.raises(ConfigError, match=r"regions\.rtt_ms\.eu\.mars: no pool has region 'mars'"):
        parse_config(minimal(pools=pools, regions={"rtt_ms": {"eu": {"mars": 5}}}))
    with pytest.raises(ConfigError, match=r"pools\.0\.region"):
        parse_config(minimal(pools=[{**pools[0], "region": "eu west"}]))
    with pytest.raises(ConfigError, match=r"pools\.0\.alt_svc"):
        parse_config(minimal(pools=[{**pools[0], "alt_svc": "h2=\":443\"\r\nx: y"}]))


def test_example_config_loads() -> None:
    cfg = load_config(ROOT / "examples" / "gateway.yaml")
    assert cfg.pools[0].scheduling_policy == "priority"


def test_schema_file_is_current() -> None:
    on_disk = json.loads((ROOT / "schemas" / "gateway.schema.json").read_text())
    assert on_disk == json_schema(), "regenerate with: python -m turbogate.config schemas/gateway.schema.json"


def test_serve_refuses_a_bad_config_with_the_field_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(minimal(tiers={"turbo": {"deadline_s": -1}})))
    proc = subprocess.run([sys.executable, "-m", "turbogate", "serve", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "tiers.turbo.deadline_s: must be > 0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_refuses_a_missing_geoip_database(tmp_path: Path) -> None:
    path = tmp_path / "geo.yaml"
    path.write_text(yaml.safe_dump(minimal(regions={"geoip_db": str(tmp_path / "none.mmdb")})))
    proc = subprocess.run([sys.executable, "-m", "turbogate", "serve", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "regions.geoip_db: cannot open" in proc.stderr and "Traceback" not in proc.stderr


def test_hash_key_helper() -> None:
    proc = subprocess.run([sys.executable, "-m", "turbogate", "serve", "--hash-key", "sk-x"],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == hash_key("sk-x")
    piped = subprocess.run([sys.executable, "-m", "turbogate", "serve", "--hash-key", "-"], input="sk-y\n",
                           capture_output=True, text=True, timeout=60)
    assert piped.stdout.strip() == hash_key("sk-y")


def test_dscp_by_number_or_name_and_bad_values_name_the_field() -> None:
    cfg = parse_config(minimal(tiers={"turbo": {"dscp": "ef"}, "relax": {"dscp": 8}}))
    assert (cfg.tiers["turbo"].dscp, cfg.tiers["standard"].dscp, cfg.tiers["relax"].dscp) == (46, None, 8)
    for bad in (64, "gold", True, [46]):
        with pytest.raises(ConfigError, match=r"tiers\.turbo\.dscp"):
            parse_config(minimal(tiers={"turbo": {"dscp": bad}}))


def test_coalesce_is_off_by_default_and_validated() -> None:
    cfg = parse_config(minimal())
    assert cfg.coalesce.routes == []
    on = parse_config(minimal(coalesce={"routes": ["/v1/chat/completions"], "window_s": 0.5, "max_span_s": 2}))
    policy = coalesce_policy(on.coalesce)
    assert (policy.window_s, policy.max_span_s, policy.max_requests) == (0.5, 2, 10)
    assert policy.ignored_fields == frozenset({"user"})
    for bad, field in (({"routes": ["/v1/models"]}, "coalesce.routes.0"),
                       ({"max_requests": 1}, "coalesce.max_requests"),
                       ({"window_s": 2, "max_span_s": 1}, "window_s must not exceed")):
        with pytest.raises(ConfigError) as info:
            parse_config(minimal(coalesce=bad))
        assert field in str(info.value)


@pytest.mark.parametrize(("replica", "scraped", "metrics", "health"), [
    ({"engine": "vllm"}, True, "/metrics", "/health"),
    # llama_cpp.server has neither /metrics nor /health: own in-flight counts, health on /v1/models.
    ({"engine": "llamacpp"}, False, None, "/v1/models"),
    # llama-server --metrics: scraped when its metrics path is given.
    ({"engine": "llamacpp", "metrics_path": "/metrics", "health_path": "/health"}, True, "/metrics", "/health"),
    ({"engine": "openai"}, False, None, "/health"),
])
def test_engine_kind_sets_what_is_scraped_and_probed(
    replica: dict[str, Any], scraped: bool, metrics: str | None, health: str
) -> None:
    cfg = parse_config(minimal(pools=[{"name": "p", "models": ["m"], "replicas": [{"url": "http://h:1", **replica}]}]))
    r = cfg.pools[0].replicas[0]
    assert (r.scraped, r.metrics_path, r.health_path) == (scraped, metrics, health)
