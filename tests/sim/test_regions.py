"""``turbogate sim`` with two regions: the example fleet through the CLI, and the Flow's L3 rules
in virtual time (each client region served near home, spilling over under load, failing over
when a region goes down)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tests.sim.helpers import load
from turbogate.cli import app
from turbogate.config import load_config
from turbogate.results import RequestRecord, load_run
from turbogate.sim.build import SimConfig, build_simulation
from turbogate.sim.fleet import load_fleet, parse_fleet
from turbogate.sim.regions import SimRegions

ROOT = Path(__file__).resolve().parents[2]
GATEWAY, FLEET = ROOT / "examples" / "gateway-2regions.yaml", ROOT / "examples" / "fleet-2regions.yaml"
KEY = "sk-acme-example"
REGIONS = SimRegions({"eu": 0.7, "us": 0.3}, {}, {})  # the example's shares: tells each record's client region


def by_region(records: list[RequestRecord], since: float = 0.0) -> dict[str, Counter[str]]:
    """Client region → pool → requests served (ok) that were sent after ``since``."""
    out: dict[str, Counter[str]] = {}
    for r in records:
        if r.ok and r.replica is not None and r.scheduled_s >= since:
            region = REGIONS.region_of(r.id)
            assert region is not None
            out.setdefault(region, Counter())[r.replica.split("/")[0]] += 1
    return out


def test_the_example_two_region_fleet_runs_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "sim", "--config", str(GATEWAY), "--fleet", str(FLEET), "--api-key", KEY, "--qps", "3", "--duration", "30",
        "--prompt-tokens", "128", "--output-tokens", "48", "--out", str(out), "--no-progress", "--no-report"])
    assert result.exit_code == 0, result.output
    run = load_run(out)
    assert run.requests and all(r.ok for r in run.requests)
    served = by_region(list(run.requests))
    # light load: every client region is served at home (the 80 ms ocean outweighs any queue)
    assert served["eu"]["llama-eu"] > 0 and served["eu"]["llama-us"] == 0
    assert served["us"]["llama-us"] > 0 and served["us"]["llama-eu"] == 0


def _simulate(fleet_extra: dict[str, object], qps: float, duration: float = 40.0) -> list[RequestRecord]:
    data = yaml.safe_load(FLEET.read_text())
    data.update(fleet_extra)
    sc = SimConfig(gateway=load_config(GATEWAY), fleet=parse_fleet(data), api_keys=(KEY,),
                   load=load(qps=qps, duration=duration, tiers="standard=1", output_tokens="256"))
    sim, _ = build_simulation(sc)
    return sim.run()


def test_eu_clients_spill_to_us_when_the_eu_queue_costs_more_than_the_ocean() -> None:
    served = by_region(_simulate({}, qps=14.0))
    assert served["eu"]["llama-eu"] > served["eu"]["llama-us"] > 0, served  # most stay home, the overflow crosses
    assert served["us"]["llama-us"] > 0


def test_eu_clients_fail_over_to_us_while_the_eu_pool_is_down() -> None:
    outage = {"failures": [{"replica": "llama-eu/0", "down_at_s": 10, "up_at_s": 25},
                           {"replica": "llama-eu/1", "down_at_s": 10, "up_at_s": 25}]}
    records = _simulate(outage, qps=2.0)
    during = by_region([r for r in records if 12 <= r.scheduled_s < 24])
    assert during["eu"]["llama-us"] > 0 and during["eu"]["llama-eu"] == 0
    after = by_region(records, since=32)
    assert after["eu"]["llama-eu"] > 0 and after["eu"]["llama-us"] == 0  # back home once it is back


def test_the_fleet_file_checks_its_regions() -> None:
    data = yaml.safe_load(FLEET.read_text())
    assert load_fleet(FLEET).clients == {"eu": 0.7, "us": 0.3}
    for bad, field in (({"clients": {"eu": 0}}, "clients.eu"), ({"region_rtt_ms": {"eu": {"us": -1}}},
                                                                   "region_rtt_ms.eu.us")):
        try:
            parse_fleet({**data, **bad})
        except Exception as exc:  # ConfigError
            assert field in str(exc)
        else:
            raise AssertionError(f"{bad} was accepted")
