"""A trace as a replay schedule (pure): the window, the speed-up, each request's tier and tenant.

``plan_replay`` cuts the trace to ``--window START:END`` (trace seconds), compresses time
``--speedup`` times, and gives each request a tier: the one the trace says it asked for, else
(or with ``reassign``) its tenant's from ``--tier-by-tenant``, else one drawn from the
``--tiers`` share by a stable hash of the request (its trace time, tenant and token counts), so
the same request gets the same tier in every window, at every speed, in bench and in sim.

A request's prompt is made so the engine counts exactly the trace's tokens: ``text_tokens`` is
the prompt text's length in the emulator's four-characters-per-token estimate after the chat
(or completions) framing the engine adds.  Output lengths are the trace's, sent as
``max_tokens`` with ``ignore_eos``.  A request whose lengths the trace does not know (refused
by the gateway it was captured at) asks for the median of the known ones.
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turbogate.bench.arrivals import Scheduled
from turbogate.bench.workload import RequestSpec, TierMix, synthetic_prompt
from turbogate.emulator.tokens import BOS_TOKENS, CHAT_ASSISTANT_HEADER, CHAT_MESSAGE_OVERHEAD
from turbogate.results.schema import Step
from turbogate.trace.format import TIERS, Trace, TraceError, TraceRequest

#: Tokens the engine adds around one chat message (Llama 3 framing, emulator/tokens.py).
CHAT_FRAMING = BOS_TOKENS + CHAT_MESSAGE_OVERHEAD + CHAT_ASSISTANT_HEADER


def text_tokens(prompt_tokens: int, chat: bool) -> int:
    """Tokens of prompt text that make the engine count ``prompt_tokens`` (at least 1)."""
    return max(1, prompt_tokens - (CHAT_FRAMING if chat else BOS_TOKENS))


def engine_tokens(text: int, chat: bool) -> int:
    return text + (CHAT_FRAMING if chat else BOS_TOKENS)


def parse_seconds(value: str, what: str) -> float:
    """``90``, ``90s``, ``10m``, ``1.5h`` → seconds."""
    v = value.strip().lower()
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(v[-1:]) if v else None
    try:
        x = float(v[:-1] if scale else v) * (scale or 1.0)
    except ValueError:
        raise TraceError(f"{what}: {value!r} is not a time (seconds, or with s, m or h)") from None
    if not math.isfinite(x) or x < 0:
        raise TraceError(f"{what}: {value!r} must be >= 0")
    return x


def parse_window(spec: str | None) -> tuple[float, float | None]:
    """``START:END`` in trace time (either side may be empty) → (start, end or None)."""
    if not spec:
        return 0.0, None
    start, sep, end = spec.partition(":")
    if not sep:
        raise TraceError(f"--window: {spec!r} must be START:END (e.g. 600:1200 or 10m:20m)")
    lo = parse_seconds(start, "--window start") if start.strip() else 0.0
    hi = parse_seconds(end, "--window end") if end.strip() else None
    if hi is not None and hi <= lo:
        raise TraceError(f"--window: the end ({hi:g} s) must come after the start ({lo:g} s)")
    return lo, hi


def parse_tier_by_tenant(spec: str | None) -> dict[str, str]:
    """``acme=turbo,beta=standard`` → {tenant: tier}."""
    out: dict[str, str] = {}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        tenant, sep, tier = item.partition("=")
        tier = tier.strip().lower()
        if not sep or not tenant.strip() or tier not in TIERS:
            raise TraceError(f"--tier-by-tenant: {item!r} must be TENANT=TIER with TIER one of {', '.join(TIERS)}")
        out[tenant.strip()] = tier
    return out


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    speedup: float = 1.0
    window: tuple[float, float | None] = (0.0, None)  # trace seconds
    share: TierMix = field(default_factory=TierMix)  # for requests the other rules leave without a tier
    by_tenant: Mapping[str, str] = field(default_factory=dict)
    reassign: bool = False  # ignore the tiers the trace asked for
    steps: int = 10  # equal slices of the replay for per-step statistics

    def __post_init__(self) -> None:
        if not self.speedup > 0 or not math.isfinite(self.speedup):
            raise TraceError(f"--speedup must be > 0, got {self.speedup}")
        if self.steps < 1:
            raise TraceError("--steps must be >= 1")


@dataclass(frozen=True, slots=True)
class ReplayItem:
    t: float  # replay seconds from its start
    prompt_tokens: int  # the engine's count to reproduce
    output_tokens: int
    tier: str | None
    tenant: str | None
    trace_t: float  # the request's time in the trace


@dataclass(frozen=True, slots=True)
class Replay:
    """What ``bench --trace`` sends and ``sim --trace`` simulates."""

    items: tuple[ReplayItem, ...]
    duration_s: float  # replay seconds (the window's length / speedup)
    steps: tuple[Step, ...]
    tenants: tuple[str, ...]  # the trace's tenants, sorted: tenant i uses API key i mod keys
    source: str
    speedup: float
    window: tuple[float, float]  # trace seconds actually replayed
    notes: tuple[str, ...] = ()
    attribution: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "requests": len(self.items), "speedup": self.speedup,
                "window_s": list(self.window), "duration_s": self.duration_s, "tenants": len(self.tenants),
                "attribution": self.attribution}

    def api_key(self, item: ReplayItem, n_keys: int) -> int | None:
        if not n_keys:
            return None
        if item.tenant is None or item.tenant not in self.tenants:
            return 0
        return self.tenants.index(item.tenant) % n_keys


def stable_unit(r: TraceRequest) -> float:
    """A number in [0, 1) that only the request decides (its time to the microsecond, tenant, lengths)."""
    key = f"{round(r.t * 1e6)}|{r.tenant}|{r.prompt_tokens}|{r.output_tokens}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0**64


def _pick(share: TierMix, u: float) -> str | None:
    acc = 0.0
    for name, w in share.weights:
        acc += w
        if u < acc:
            return name
    return share.weights[-1][0] if share.weights else None


def assign_tier(r: TraceRequest, opts: ReplayOptions) -> str | None:
    if r.tier_asked is not None and not opts.reassign:
        return r.tier_asked
    if r.tenant is not None and r.tenant in opts.by_tenant:
        return opts.by_tenant[r.tenant]
    return _pick(opts.share, stable_unit(r))


def equal_steps(duration_s: float, n: int, times: Sequence[float]) -> tuple[Step, ...]:
    """``n`` equal slices of [0, duration); each step's offered rate is its requests over its width."""
    width = duration_s / n
    counts = [0] * n
    for t in times:
        counts[min(n - 1, int(t / width))] += 1
    return tuple(Step(i, i * width, (i + 1) * width, counts[i] / width) for i in range(n))


def plan_replay(trace: Trace, opts: ReplayOptions) -> Replay:
    lo, hi = opts.window
    end = hi if hi is not None else trace.duration_s
    chosen = [r for r in trace.requests if lo <= r.t and (r.t < end or (hi is None and r.t <= end))]
    if not chosen:
        raise TraceError(f"--window {lo:g}:{end:g} holds none of the trace's {len(trace.requests)} requests "
                         f"(it spans 0 to {trace.duration_s:g} s)")
    known_p = [r.prompt_tokens for r in chosen if r.prompt_tokens]
    known_o = [r.output_tokens for r in chosen if r.output_tokens]
    fill_p = round(statistics.median(known_p)) if known_p else 1
    fill_o = round(statistics.median(known_o)) if known_o else 1
    notes = []
    unknown = sum(1 for r in chosen if not r.prompt_tokens or not r.output_tokens)
    if unknown:
        notes.append(f"{unknown} requests without known lengths (refused where captured) ask for the window's "
                     f"median: {fill_p} prompt, {fill_o} output tokens")
    k = opts.speedup
    items = tuple(ReplayItem((r.t - lo) / k, r.prompt_tokens or fill_p, r.output_tokens or fill_o,
                             assign_tier(r, opts), r.tenant, r.t) for r in chosen)
    duration = max((end - lo) / k, items[-1].t + 1e-9)
    steps = equal_steps(duration, opts.steps, [i.t for i in items])
    return Replay(items, duration, steps, trace.tenants(), trace.header.source, k, (lo, end), tuple(notes),
                  trace.header.attribution)


def _step_of(steps: Sequence[Step], t: float) -> Step:
    width = steps[0].duration_s
    return steps[min(len(steps) - 1, int(t / width))]


def replay_draws(replay: Replay, seed: int,
                 per_request_seed: bool) -> Iterator[tuple[ReplayItem, Step, int, int | None]]:
    """Each item with its step, its prompt text's seed and its request seed, from one seeded RNG, so
    bench (which writes the text) and sim (which only counts it) draw the same numbers."""
    rng = random.Random(seed)
    steps = replay.steps
    for item in replay.items:
        text_seed = rng.getrandbits(64)
        yield item, _step_of(steps, item.t), text_seed, rng.randrange(2**31) if per_request_seed else None


def bench_schedule(replay: Replay, *, chat: bool, seed: int, n_api_keys: int,
                   per_request_seed: bool = True) -> list[Scheduled]:
    """The bench's open-loop schedule of the replay: each request at its (sped-up) trace time."""
    out = []
    for item, step, text_seed, req_seed in replay_draws(replay, seed, per_request_seed):
        hint = text_tokens(item.prompt_tokens, chat)
        spec = RequestSpec(prompt=synthetic_prompt(hint, random.Random(text_seed)),
                           max_tokens=max(1, item.output_tokens), tier=item.tier,
                           api_key=replay.api_key(item, n_api_keys), seed=req_seed, prompt_len_hint=hint)
        out.append(Scheduled(item.t, step.index, step.offered_rps, spec))
    return out


def rate_series(times: Sequence[float], duration_s: float, bin_s: float) -> list[tuple[float, float]]:
    """(bin start, requests per second) over [0, duration) in bins of ``bin_s``."""
    n = max(1, math.ceil(duration_s / bin_s))
    counts = [0] * n
    for t in times:
        counts[min(n - 1, max(0, int(t / bin_s)))] += 1
    return [(i * bin_s, c / bin_s) for i, c in enumerate(counts)]
