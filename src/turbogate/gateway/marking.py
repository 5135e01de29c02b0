"""DSCP marking of upstream traffic per tier: which keep-alive pool a tier's calls use.

A mark is a property of a connection (``IP_TOS`` is set before it connects), and kept-alive
connections are reused, so each distinct mark gets its own pool per replica; tiers with the same
mark share one, and unmarked tiers use the replica's plain pool (the one scrapes and health
probes use too: only requests are marked).
"""

from __future__ import annotations

from collections.abc import Mapping

from turbogate.config import GatewayConfig
from turbogate.dscp import tos_byte
from turbogate.httpclient import UpstreamPool
from turbogate.sched import Tier


def tier_tos(config: GatewayConfig) -> dict[Tier, int]:
    """The IP TOS byte of each tier that has a ``dscp`` in the config."""
    return {Tier(name): tos_byte(int(t.dscp)) for name, t in config.tiers.items() if t.dscp is not None}


def marked_pools(url: str, connect_timeout_s: float, headers: Mapping[str, str] | None,
                 marks: Mapping[Tier, int]) -> dict[Tier, UpstreamPool]:
    """One pool per distinct mark for one replica, by the tiers that use it."""
    by_tos: dict[int, UpstreamPool] = {}
    out: dict[Tier, UpstreamPool] = {}
    for tier, tos in marks.items():
        pool = by_tos.get(tos)
        if pool is None:
            pool = by_tos[tos] = UpstreamPool(url, connect_timeout_s, headers, tos=tos)
        out[tier] = pool
    return out
