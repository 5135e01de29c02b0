"""``turbogate serve``: run the tiered gateway under uvicorn (uvloop + httptools)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import typer

from turbogate.config import GatewayConfig, hash_key, load_config, parse_config
from turbogate.configpolicy import knee_source
from turbogate.errors import BadInput, ConfigError


def configure_logging(level: str) -> None:
    """The gateway's own log lines (replica health, scrape failures, start-up) at ``level``, on
    stderr beside uvicorn's; secrets are never logged (no headers, no bodies)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("turbogate")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


def with_knee_from(cfg: GatewayConfig, specs: list[str]) -> GatewayConfig:
    """``--knee-from``: ``SOURCE`` for every pool without a knee of its own, ``POOL=SOURCE`` for
    one pool (replacing its own); SOURCE is a run folder, ``plan`` or ``online``.  Each knee is
    then resolved once, so a bad folder or plan is a clear error before the server starts."""
    if not specs:
        return cfg
    data = cfg.model_dump(mode="json")
    pools = {p["name"]: p for p in data["pools"]}
    for spec in specs:
        name, sep, source = spec.partition("=")
        if not sep:
            for p in pools.values():
                if p["knee_rps"] is None and p["knee_from"] is None:
                    p["knee_from"] = spec
        elif name not in pools:
            raise ConfigError(f"--knee-from {spec}: no pool {name!r} (pools: {', '.join(pools)})")
        else:
            pools[name].update(knee_rps=None, knee_from=source)
    return parse_config(data, "--knee-from")


def check_knees(cfg: GatewayConfig) -> None:
    """Resolve every pool's knee now (reads run folders, runs the planner): ``ConfigError`` if one fails."""
    for p in cfg.pools:
        knee_source(p, cfg.knee_guard.online)


def serve(
    config: Path | None = typer.Option(None, "--config", "-c", help="Gateway YAML config (required to serve)."),
    host: str | None = typer.Option(None, "--host", help="Listen address (default: the config's listen.host)."),
    port: int | None = typer.Option(None, "--port", help="Listen port (default: the config's listen.port)."),
    workers: int = typer.Option(
        1, "--workers", min=1,
        help="Worker processes. Each holds its own queues and scraped loads; usage, budgets, switches and tenant "
             "limits are shared through the store (docs/metering.md).",
    ),
    log_level: str = typer.Option(
        "info", "--log-level",
        help="critical|error|warning|info|debug (info: the start-up lines, i.e. the listening address, pools and "
             "tiers, then warnings: replicas ejected or back, scrape failures)"),
    knee_from: list[str] = typer.Option(
        [], "--knee-from", metavar="[POOL=]SOURCE",
        help="The knee guard's knee: a bench/sim run folder (its measured knee), 'plan' (the planner's, from the "
             "pool's plan block) or 'online' (learnt from live signals). Without POOL= it applies to every pool "
             "without knee_rps/knee_from in the config. Repeatable."),
    hash_key_value: str | None = typer.Option(
        None, "--hash-key", metavar="KEY",
        help="Print the sha256 to store for an API key or admin token, and exit ('-' reads it from stdin).",
    ),
) -> None:
    """Run the OpenAI-compatible tiered gateway."""
    if hash_key_value is not None:
        secret = sys.stdin.readline().rstrip("\n") if hash_key_value == "-" else hash_key_value
        typer.echo(hash_key(secret))
        return
    # Each error below goes up as one line on stderr with exit 2 (clierrors.py).
    if config is None:
        raise BadInput("--config PATH is required", "examples/gateway.yaml is a start")
    cfg = with_knee_from(load_config(config), knee_from)
    check_knees(cfg)
    missing = sorted({r.api_key_env for p in cfg.pools for r in p.replicas
                      if r.api_key_env and not os.environ.get(r.api_key_env)})
    if missing:
        raise ConfigError(f"api_key_env names unset environment variables: {', '.join(missing)}")
    if cfg.regions is not None and cfg.regions.geoip_db:  # the optional extra and the file, before any worker
        from turbogate.gateway.regions import open_geoip

        open_geoip(cfg.regions.geoip_db).close()

    import uvicorn

    configure_logging(log_level)
    os.environ["TURBOGATE_LOG_LEVEL"] = log_level
    os.environ["TURBOGATE_CONFIG"] = str(config.resolve())  # the default SQLite store lives beside it
    bind_host = host or cfg.listen.host
    bind_port = cfg.listen.port if port is None else port
    if workers > 1 and cfg.metrics.port is not None:
        raise BadInput("metrics.port serves one process's metrics", "use --workers 1, or metrics.token_sha256 on "
                       "the main port")
    from turbogate.gateway.guard import GuardedHttpToolsProtocol

    common = {"host": bind_host, "port": bind_port, "log_level": log_level.lower(), "access_log": False,
              # httptools, guarded: header size, header and body timeouts (gateway/guard.py).
              "loop": "uvloop", "http": GuardedHttpToolsProtocol, "lifespan": "on", "timeout_keep_alive": 30,
              # Lean hot path: no proxy-header middleware, no Server/Date header formatting.
              "proxy_headers": False, "server_header": False, "date_header": False,
              # A lease WebSocket's message is a heartbeat: refused past the cap before it is buffered.
              "ws_max_size": cfg.limits.ws_max_message_bytes, "ws_max_queue": 4}
    if cfg.tls is not None:
        common.update(ssl_certfile=cfg.tls.certfile, ssl_keyfile=cfg.tls.keyfile)
    if workers == 1:
        from turbogate.gateway.app import built_app

        uvicorn.run(built_app(cfg), **common)  # type: ignore[arg-type]
        return
    os.environ["TURBOGATE_KNEE_FROM"] = "\n".join(knee_from)  # each worker applies it to the file it loads
    uvicorn.run("turbogate.gateway.app:app_from_env", factory=True, workers=workers, **common)  # type: ignore[arg-type]
