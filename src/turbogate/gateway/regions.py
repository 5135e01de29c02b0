"""L3's I/O side: read the client's region (a configured header, else an optional MaxMind
database), time the round-trip probes and send the warm-ups the flow asks for, and the headers
an answer carries (``X-Turbogate-Region``, ``Alt-Svc``).  Which pool serves a request, what a
latency sample means and when to warm a replica up are the core's (sched/regions.py,
sched/warmup.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from turbogate.asgi import Scope, header
from turbogate.config import GatewayConfig, RegionsConfig
from turbogate.errors import ConfigError, TurbogateError, UpstreamError
from turbogate.gateway.runtime import ReplicaIO, Runtime
from turbogate.sched.regions import REGION_PATTERN

log = logging.getLogger("turbogate.gateway")

SESSION_HEADER = b"x-session-id"
MAX_SESSION_BYTES = 256


class BadHeader(TurbogateError, ValueError):
    """A region or session header the gateway refuses (a 400 naming it)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def open_geoip(path: str) -> Any:
    """A ``geoip2`` reader for ``path`` (``ConfigError`` when the extra is missing or the file is bad)."""
    try:
        import geoip2.database
    except ImportError:
        raise ConfigError("regions.geoip_db needs the geoip2 package: pip install 'turbogate[geoip]'") from None
    try:
        return geoip2.database.Reader(path)
    except (OSError, ValueError, RuntimeError) as exc:  # maxminddb's InvalidDatabaseError is a RuntimeError
        raise ConfigError(f"regions.geoip_db: cannot open {path} ({exc})") from None


class ClientRegions:
    """The client's region for one request: the configured header (mapped through ``aliases``),
    else the client address's country (or ``AS<number>``) from the MaxMind database, mapped the
    same way; None when neither says (the core then uses ``default_region``)."""

    def __init__(self, cfg: RegionsConfig | None) -> None:
        self.header = (cfg.client_header if cfg else "x-client-region").lower().encode()
        self.header_name = cfg.client_header if cfg else "X-Client-Region"
        self.aliases = dict(cfg.aliases) if cfg else {}
        self.reader = open_geoip(cfg.geoip_db) if cfg and cfg.geoip_db else None
        self._kind = ""
        if self.reader is not None:
            kind = str(self.reader.metadata().database_type)
            self._kind = "asn" if "ASN" in kind else "city" if "City" in kind else "country"

    def _name(self, value: str) -> str | None:
        mapped = self.aliases.get(value) or self.aliases.get(value.upper())
        return mapped or value

    def region(self, scope: Scope) -> str | None:
        return self.region_of(header(scope, self.header), scope)

    def region_of(self, raw: bytes | None, scope: Scope) -> str | None:
        """The client's region from its header's value ``raw`` (None: not sent), else from its address."""
        if raw is not None:
            value = raw.decode("latin-1").strip()
            name = self._name(value) if value else None
            if name is None or not REGION_PATTERN.match(name):
                raise BadHeader(self.header_name, f"{self.header_name} must be a region name: 1-32 letters, digits, "
                                "'.', '-' or '_'")
            return name
        if self.reader is None:
            return None
        client = scope.get("client")
        if not client:
            return None
        return self._lookup(str(client[0]))

    def _lookup(self, address: str) -> str | None:
        import geoip2.errors

        assert self.reader is not None

        try:
            if self._kind == "asn":
                key = f"AS{self.reader.asn(address).autonomous_system_number}"
            else:
                found = self.reader.city(address) if self._kind == "city" else self.reader.country(address)
                key = found.country.iso_code or ""
        except (geoip2.errors.AddressNotFoundError, ValueError):
            return None
        name = self._name(key) if key else None
        return name if name and REGION_PATTERN.match(name) else None


def session_of(raw: bytes | None) -> str | None:
    """The session id from the ``X-Session-Id`` value ``raw`` (None: not sent)."""
    if raw is None:
        return None
    if not raw or len(raw) > MAX_SESSION_BYTES or not all(0x21 <= b <= 0x7E for b in raw):
        raise BadHeader("X-Session-Id", f"X-Session-Id must be 1-{MAX_SESSION_BYTES} visible ASCII characters")
    return raw.decode("ascii")


def pool_headers(config: GatewayConfig) -> dict[str, list[tuple[bytes, bytes]]]:
    """Per pool, the headers of every answer it serves: its region and its Alt-Svc."""
    out: dict[str, list[tuple[bytes, bytes]]] = {}
    for p in config.pools:
        headers = []
        if p.region is not None:
            headers.append((b"x-turbogate-region", p.region.encode()))
        if p.alt_svc is not None:
            headers.append((b"alt-svc", p.alt_svc.encode()))
        out[p.name] = headers
    return out


async def measure_rtt(rt: Runtime, r: ReplicaIO) -> float | None:
    """Seconds for one GET of the replica's health path on its keep-alive pool (None: it failed)."""
    assert r.client is not None
    start = time.perf_counter()
    try:
        async with asyncio.timeout(rt.config.scrape.timeout_s):
            resp = await r.client.request(b"GET", r.health_path)
            try:
                await resp.read()
            finally:
                resp.release()
    except (UpstreamError, TimeoutError):
        return None
    return time.perf_counter() - start


async def warm_up(rt: Runtime, r: ReplicaIO, model: str) -> bool:
    """Send the configured warm-up request for ``model``; True on a 2xx answer."""
    assert r.client is not None
    cfg = rt.config.warmup
    body: dict[str, Any] = {"model": model, "max_tokens": cfg.max_tokens}
    if cfg.path == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": cfg.prompt}]
    else:
        body["prompt"] = cfg.prompt
    try:
        async with asyncio.timeout(cfg.timeout_s):
            resp = await r.client.request(b"POST", cfg.path, orjson.dumps(body))
            try:
                await resp.read()
            finally:
                resp.release()
    except (UpstreamError, TimeoutError) as exc:
        log.warning("warm-up of replica %s failed: %s", r.state.id, exc or "timed out")
        return False
    if not 200 <= resp.status < 300:
        log.warning("warm-up of replica %s answered HTTP %d", r.state.id, resp.status)
        return False
    log.info("replica %s warmed up", r.state.id)
    return True
