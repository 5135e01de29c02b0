"""One validation-error formatter (turbogate/validation.py): the gateway's config and the
simulator's fleet word the same mistake the same way, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from turbogate.config import parse_config
from turbogate.errors import ConfigError
from turbogate.sim.fleet import parse_fleet

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _message(parse: object, data: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        parse(data)  # type: ignore[operator]
    return str(info.value)


def test_config_and_fleet_word_the_same_mistake_alike() -> None:
    fleet = yaml.safe_load((EXAMPLES / "fleet.yaml").read_text())
    config = yaml.safe_load((EXAMPLES / "gateway.yaml").read_text())
    for data in (fleet, config):
        data["pools"] = "all of them"
    assert _message(parse_fleet, fleet).removeprefix("fleet: ") \
        == _message(parse_config, config).removeprefix("config: ") == "pools: Input should be a valid list"


def test_bounds_read_as_comparisons() -> None:
    fleet = yaml.safe_load((EXAMPLES / "fleet.yaml").read_text())
    fleet["scrape"] = {"interval_s": -1}
    config = yaml.safe_load((EXAMPLES / "gateway.yaml").read_text())
    config["scrape"] = {"interval_s": -1}
    assert _message(parse_fleet, fleet) == "fleet: scrape.interval_s: must be > 0"
    assert _message(parse_config, config) == "config: scrape.interval_s: must be >= 0.1"
    assert _message(parse_fleet, {}) == "fleet: pools: Field required"
