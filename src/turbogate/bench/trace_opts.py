"""The trace-replay options ``bench`` and ``sim`` share, defined once (the CLI shell).

A command takes them as one parameter, ``replay: TraceArgs = REPLAY``, under
``@expand(replay=TRACE_OPTIONS)`` (turbogate/optgroup.py): ``--trace``, ``--trace-format``,
``--speedup``, ``--window``, ``--tier-by-tenant`` and ``--reassign-tiers`` stand in that
parameter's place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from turbogate.bench import options as opt
from turbogate.bench.options import LoadOptions, with_trace
from turbogate.optgroup import OptionGroup


@dataclass(frozen=True, slots=True)
class TraceArgs:
    """What the trace options asked for; ``trace`` None: no replay."""

    trace: Path | None = None
    trace_format: str = "auto"
    speedup: float = 1.0
    window: str | None = None
    tier_by_tenant: str | None = None
    reassign_tiers: bool = False

    def apply(self, load: LoadOptions) -> LoadOptions:
        """``load`` replaying the trace, or ``load`` itself without one; ValueError names the bad option."""
        if self.trace is None:
            return load
        return with_trace(load, self.trace, fmt=self.trace_format, speedup=self.speedup, window=self.window,
                          tier_by_tenant=self.tier_by_tenant, reassign_tiers=self.reassign_tiers)


TRACE_OPTIONS = OptionGroup(TraceArgs, {
    "trace": (Path | None, opt.TRACE),
    "trace_format": (str, opt.TRACE_FORMAT),
    "speedup": (float, opt.SPEEDUP),
    "window": (str | None, opt.WINDOW),
    "tier_by_tenant": (str | None, opt.TIER_BY_TENANT),
    "reassign_tiers": (bool, opt.REASSIGN_TIERS),
})
REPLAY = TRACE_OPTIONS.marker
