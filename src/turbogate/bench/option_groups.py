"""The option groups ``bench`` and ``sim`` share, each defined once (the CLI shell).

A command takes a group as one parameter (``rate: RateArgs = RATE``) under
``@expand(rate=RATE_OPTIONS, ...)`` (turbogate/optgroup.py): the group's options stand in that
parameter's place.  The options themselves are ``bench/options.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from turbogate.bench import options as opt
from turbogate.bench.options import LoadOptions, with_trace
from turbogate.optgroup import OptionGroup


@dataclass(frozen=True, slots=True)
class RateArgs:
    """The load's shape and rates, and how long it runs."""

    shape: str | None
    qps: float | None
    qps_start: float | None
    qps_end: float | None
    steps: int
    duration: float


@dataclass(frozen=True, slots=True)
class MixArgs:
    """When requests arrive, how long they are and which tiers they ask."""

    arrivals: str
    burstiness: float
    prompt_tokens: str
    output_tokens: str
    dataset: Path | None
    no_seed: bool
    tiers: str | None


@dataclass(frozen=True, slots=True)
class RequestArgs:
    """How each request is sent: its keys, its length settings, streaming, the seed."""

    api_key: list[str]
    ignore_eos: bool
    min_tokens: bool
    stream: bool
    random_seed: int


@dataclass(frozen=True, slots=True)
class TraceArgs:
    """What the trace-replay options asked for; ``trace`` None: no replay."""

    trace: Path | None
    trace_format: str
    speedup: float
    window: str | None
    tier_by_tenant: str | None
    reassign_tiers: bool

    def apply(self, load: LoadOptions) -> LoadOptions:
        """``load`` replaying the trace, or ``load`` itself without one; ValueError names the bad option."""
        if self.trace is None:
            return load
        return with_trace(load, self.trace, fmt=self.trace_format, speedup=self.speedup, window=self.window,
                          tier_by_tenant=self.tier_by_tenant, reassign_tiers=self.reassign_tiers)


RATE_OPTIONS = OptionGroup(RateArgs, {
    "shape": (str | None, opt.SHAPE),
    "qps": (float | None, opt.QPS),
    "qps_start": (float | None, opt.QPS_START),
    "qps_end": (float | None, opt.QPS_END),
    "steps": (int, opt.STEPS),
    "duration": (float, opt.DURATION),
})
MIX_OPTIONS = OptionGroup(MixArgs, {
    "arrivals": (str, opt.ARRIVALS_OPT),
    "burstiness": (float, opt.BURSTINESS),
    "prompt_tokens": (str, opt.PROMPT_TOKENS),
    "output_tokens": (str, opt.OUTPUT_TOKENS),
    "dataset": (Path | None, opt.DATASET),
    "no_seed": (bool, opt.NO_SEED),
    "tiers": (str | None, opt.TIERS),
})
REQUEST_OPTIONS = OptionGroup(RequestArgs, {
    "api_key": (list[str], opt.API_KEY),
    "ignore_eos": (bool, opt.IGNORE_EOS),
    "min_tokens": (bool, opt.MIN_TOKENS),
    "stream": (bool, opt.STREAM),
    "random_seed": (int, opt.RANDOM_SEED),
})
TRACE_OPTIONS = OptionGroup(TraceArgs, {
    "trace": (Path | None, opt.TRACE),
    "trace_format": (str, opt.TRACE_FORMAT),
    "speedup": (float, opt.SPEEDUP),
    "window": (str | None, opt.WINDOW),
    "tier_by_tenant": (str | None, opt.TIER_BY_TENANT),
    "reassign_tiers": (bool, opt.REASSIGN_TIERS),
})
RATE, MIX, REQUEST, REPLAY = RATE_OPTIONS.marker, MIX_OPTIONS.marker, REQUEST_OPTIONS.marker, TRACE_OPTIONS.marker
