"""The client's region as the gateway shell reads it: a configured header mapped through
aliases, else a real MaxMind database (built here with the MaxMind DB writer) by the client's
address; and the session header."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turbogate.config import RegionsConfig
from turbogate.errors import ConfigError
from turbogate.gateway.regions import BadHeader, ClientRegions, session_of

mmdb_writer = pytest.importorskip("mmdb_writer")
pytest.importorskip("geoip2")
netaddr = pytest.importorskip("netaddr")


def scope(headers: dict[str, str] | None = None, client: str = "127.0.0.1") -> dict[str, Any]:
    return {"headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
            "client": (client, 50000)}


def build_db(path: Path, kind: str, networks: dict[str, dict[str, Any]]) -> str:
    writer = mmdb_writer.MMDBWriter(ip_version=4, database_type=kind, languages=["en"], description="test")
    for net, record in networks.items():
        writer.insert_network(netaddr.IPSet([net]), record)
    writer.to_db_file(str(path))
    return str(path)


def test_header_with_aliases() -> None:
    regions = ClientRegions(RegionsConfig(client_header="CF-IPCountry", aliases={"DE": "eu", "US": "us"}))
    assert regions.region(scope({"CF-IPCountry": "DE"})) == "eu"
    assert regions.region(scope({"CF-IPCountry": "de"})) == "eu"  # country codes in any case
    assert regions.region(scope({"CF-IPCountry": "BR"})) == "BR"  # unmapped: a region of its own
    assert regions.region(scope()) is None  # no header and no database: the default region
    with pytest.raises(BadHeader) as info:
        regions.region(scope({"CF-IPCountry": "eu west"}))
    assert info.value.name == "CF-IPCountry"
    assert ClientRegions(None).region(scope({"X-Client-Region": "ap"})) == "ap"  # no regions section


def test_country_database_by_client_address(tmp_path: Path) -> None:
    db = build_db(tmp_path / "country.mmdb", "GeoIP2-Country", {
        "127.0.0.0/24": {"country": {"iso_code": "DE"}}, "10.0.0.0/8": {"country": {"iso_code": "US"}}})
    regions = ClientRegions(RegionsConfig(geoip_db=db, aliases={"DE": "eu", "US": "us"}))
    assert regions.region(scope()) == "eu"
    assert regions.region(scope(client="10.2.3.4")) == "us"
    assert regions.region(scope(client="192.0.2.1")) is None  # not in the database
    assert regions.region(scope({"X-Client-Region": "ap"})) == "ap"  # the header wins


def test_city_and_asn_databases(tmp_path: Path) -> None:
    city = build_db(tmp_path / "city.mmdb", "GeoIP2-City", {"127.0.0.0/24": {"country": {"iso_code": "FR"}}})
    assert ClientRegions(RegionsConfig(geoip_db=city, aliases={"FR": "eu"})).region(scope()) == "eu"
    asn = build_db(tmp_path / "asn.mmdb", "GeoLite2-ASN", {"127.0.0.0/24": {"autonomous_system_number": 64500}})
    assert ClientRegions(RegionsConfig(geoip_db=asn, aliases={"AS64500": "eu"})).region(scope()) == "eu"


def test_a_missing_database_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"regions\.geoip_db"):
        ClientRegions(RegionsConfig(geoip_db=str(tmp_path / "none.mmdb")))


def test_session_header() -> None:
    assert session_of(b"chat-1") == "chat-1"
    assert session_of(None) is None  # not sent
    for bad in (b"", b"a b", b"x" * 257):
        with pytest.raises(BadHeader):
            session_of(bad)
