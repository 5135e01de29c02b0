"""The config's edge: where the gateway listens and what one client may cost it (limits, admin,
metrics access, TLS)."""

from __future__ import annotations

from pydantic import Field

from turbogate.config_base import ConfigModel, Sha256


class Listen(ConfigModel):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    idle_poll_max_us: int = Field(
        200, ge=0, le=100_000,
        description="the cap of the adaptive poll window (µs; 0: off): after the event loop goes idle it keeps "
                    "polling for a window learnt as the kernel's cpuidle-haltpoll governor learns its own, open "
                    "only while events come back within the cap (a fast engine, a client's next request), shut "
                    "while they do not (an LLM's answers take milliseconds), so a wake-up is saved where one "
                    "would cost more than the poll (gateway/busypoll.py)")
    busy_poll_us: int = Field(
        0, ge=0, le=100_000,
        description="a fixed poll window instead of the adaptive one (µs; 0, the default: adaptive, "
                    "idle_poll_max_us): after the loop goes idle, keep polling this long every time "
                    "(gateway/busypoll.py)")


class Admin(ConfigModel):
    token_sha256: Sha256 | None = Field(None, description="sha256 of the admin bearer token; no admin API if unset")


class Limits(ConfigModel):
    """What one client may cost the gateway, enforced before any key is checked (docs/security.md)."""

    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="largest request body; over it → 413")
    max_header_bytes: int = Field(64 * 1024, ge=1024, description="request line and headers; over it → 431")
    header_timeout_s: float = Field(
        10.0, gt=0, description="from a request's first byte (or a new connection) to the end of its headers → 408")
    body_timeout_s: float = Field(
        10.0, gt=0, description="longest a request body may stall; also the grace before the rate floor applies → 408")
    min_body_rate_bytes_s: float = Field(1024.0, ge=0, description="least average rate of a body after the grace")
    max_tokens: int = Field(
        131072, ge=1, description="the largest max_tokens a request may ask (the models' context); over it → 400, "
        "and the bound on one request's fair-queue cost")
    upstream_connect_timeout_s: float = Field(2.0, gt=0)
    ws_max_message_bytes: int = Field(4096, ge=125, le=1024 * 1024, description="largest WebSocket message (a lease "
                                      "heartbeat needs bytes); over it the connection is closed, code 1009")
    ws_max_connections: int = Field(1024, ge=1, description="open lease WebSockets per worker process, all tenants")
    ws_max_connections_per_tenant: int = Field(16, ge=1, description="open lease WebSockets per worker process "
                                               "and tenant; over either cap → closed at once, code 1013")


class MetricsConfig(ConfigModel):
    """Who may read ``/metrics`` (it names tenants and their traffic)."""

    token_sha256: Sha256 | None = Field(
        None, description="sha256 of a bearer token /metrics then requires; unset with no port: public")
    port: int | None = Field(
        None, ge=0, le=65535, description="serve /metrics only on this port (on listen.host), not the main one")
    host: str | None = Field(None, description="address for the metrics port (default: listen.host)")


class Tls(ConfigModel):
    """HTTPS on the main listener."""

    certfile: str = Field(min_length=1, description="PEM certificate chain")
    keyfile: str = Field(min_length=1, description="PEM private key")
