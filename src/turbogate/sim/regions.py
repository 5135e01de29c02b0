"""Regions in the simulator (L3): which client region each simulated request comes from, and the
client-leg round trip it pays to the region of the pool that serves it — the fleet file's
``clients`` and ``region_rtt_ms``.  The choice of pool is the Flow's own (sched/regions.py), fed
the same RTT table the gateway reads from its config, plus round-trip probes whose answer takes
the fleet's gateway↔pool delay (sim/core.py)."""

from __future__ import annotations

from collections.abc import Mapping

from turbogate.sim.fleet import Fleet


class SimRegions:
    def __init__(self, shares: Mapping[str, float], rtt_ms: Mapping[str, Mapping[str, float]],
                 pool_regions: Mapping[str, str | None]) -> None:
        total = sum(shares.values())
        self._cumulative: list[tuple[float, str]] = []
        acc = 0.0
        for region, share in shares.items():
            acc += share / total
            self._cumulative.append((acc, region))
        self._legs = {(c, p): table.get(r, 0.0) / 1000.0 for c, table in rtt_ms.items()
                      for p, r in pool_regions.items() if r is not None}

    def region_of(self, request_id: int) -> str | None:
        """The client region of request ``request_id``: a fixed hash of the id against the
        shares, so a run (and a test reading its records) can tell it again."""
        if not self._cumulative:
            return None
        u = ((request_id * 2654435761) & 0xFFFFFFFF) / 2**32
        for edge, region in self._cumulative:
            if u < edge:
                return region
        return self._cumulative[-1][1]

    def leg_s(self, region: str | None, pool: str) -> float:
        return self._legs.get((region, pool), 0.0) if region is not None else 0.0


def sim_regions(fleet: Fleet, pool_regions: Mapping[str, str | None]) -> SimRegions | None:
    """The fleet's regions, or None when it names no client regions."""
    if not fleet.clients:
        return None
    return SimRegions(fleet.clients, fleet.region_rtt_ms, pool_regions)
