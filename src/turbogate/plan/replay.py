"""The stepped engine driven in virtual time by a finite workload (pure).

Three workloads a published benchmark runs, and a planner's "N requests at once" question:

* ``open_arrivals``: requests arrive at given times (Poisson at a rate, or all at t = 0: a burst
  or an offline throughput run);
* ``closed_loop``: ``concurrency`` clients, each sending its next request when its last one
  finishes (``vllm bench serve --max-concurrency``, AIPerf's concurrency mode).

A request reaches the engine core ``Deployment.frontend_time(prompt)`` after it arrives (API server,
tokenisation, hand-over to the scheduler), so its TTFT counts that time and the GPU does not; longer
by ``Deployment.frontend_wait`` while the other requests stream tokens through the front end, at the
rate of the step running when it arrived (its decoded sequences that did not finish in it, over its
duration).
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from turbogate.engine import Engine, EngineConfig, Request
from turbogate.engine.profiled import first_token_wait_steps
from turbogate.perf import Deployment

LengthDraw = Callable[[random.Random], tuple[int, int]]
ClientStart = Literal["staggered", "together"]


@dataclass(frozen=True, slots=True)
class Timing:
    """One request's life in virtual seconds."""

    arrival: float
    first_token: float
    finish: float
    output_tokens: int

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        return self.finish - self.arrival

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first (None for a one-token request)."""
        if self.output_tokens < 2:
            return None
        return (self.finish - self.first_token) / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    timings: tuple[Timing, ...]
    preemptions: int
    steps: tuple[tuple[float, float, int], ...] = ()  # (start, duration, sequences that decoded a token)

    @property
    def duration(self) -> float:
        return max(t.finish for t in self.timings) - min(t.arrival for t in self.timings)

    @property
    def output_tokens_per_s(self) -> float:
        return sum(t.output_tokens for t in self.timings) / self.duration

    def steady(self, skip: int) -> ReplayResult:
        """The requests after the first ``skip`` and before the last ``skip`` sent (ramp-up and drain cut)."""
        ordered = sorted(self.timings, key=lambda t: t.arrival)
        kept = ordered[skip:len(ordered) - skip] if len(ordered) > 2 * skip else ordered
        lo, hi = min(t.arrival for t in kept), max(t.finish for t in kept)
        return ReplayResult(tuple(kept), self.preemptions, tuple(s for s in self.steps if lo <= s[0] < hi))

    def itl(self, stat: str = "median") -> float:
        """Inter-token latency over every decoded token: each step's duration, once per sequence it advanced."""
        steps = sorted((d, n) for _, d, n in self.steps if n > 0)
        total = sum(n for _, n in steps)
        if not total:
            return 0.0
        if stat != "median":
            return sum(d * n for d, n in steps) / total
        seen = 0
        for d, n in steps:
            seen += n
            if 2 * seen >= total:
                return d
        return steps[-1][0]

    def closed_loop_tokens_per_s(self, concurrency: int) -> float:
        """Little's law for a closed loop: clients × output tokens per request / time per request."""
        return concurrency * statistics.fmean(t.output_tokens for t in self.timings) / self.e2e("mean")

    def ttft(self, stat: str = "median") -> float:
        return _stat([t.ttft for t in self.timings], stat)

    def tpot(self, stat: str = "median") -> float:
        return _stat([x for t in self.timings if (x := t.tpot) is not None], stat)

    def e2e(self, stat: str = "mean") -> float:
        return _stat([t.e2e for t in self.timings], stat)


def _stat(values: list[float], stat: str) -> float:
    if not values:
        return 0.0
    return statistics.median(values) if stat == "median" else statistics.fmean(values)


class _Driver:
    """Feeds an engine requests as they become ready and records their first and last tokens."""

    def __init__(self, dep: Deployment, config: EngineConfig) -> None:
        self.engine = Engine(dep, config)
        self.dep = dep
        # The engine reports a first token after the config's output lag itself; the driver holds it only
        # for the closed form's stand-in for multi-step scheduling, where the engine runs single steps.
        self.ttft_steps = first_token_wait_steps(dep.factors, config, config.output_lag_steps)
        self.busy_steps = dep.factors.busy_ttft_steps  # more steps where others were decoding in the step
        # (ready time, order, request, arrival, whether its wait behind the streaming is in the ready time)
        self.ready: list[tuple[float, int, Request, float, bool]] = []
        self.per_streamed = dep.factors.frontend_per_streamed_token_s
        self.streams: list[tuple[float, float, float]] = []  # (start, end, tokens/s streamed by those left)
        self.arrival: dict[str, float] = {}
        self.first: dict[str, float] = {}
        self.timings: list[Timing] = []
        self.steps: list[tuple[float, float, int]] = []
        self.pending: list[tuple[str, float]] = []
        self._order = 0

    def submit(self, req: Request, arrival: float) -> None:
        ready = arrival + self.dep.frontend_time(req.prompt_tokens)
        heapq.heappush(self.ready, (ready, self._order, req, arrival, self.per_streamed <= 0.0))
        self._order += 1

    def streamed_at(self, t: float) -> float:
        """Tokens/s the running requests were streaming at ``t``: those of the step running then (0 if idle)."""
        for start, end, rate in reversed(self.streams):
            if start <= t:
                return rate if t <= end else 0.0
        return 0.0

    def run(self, on_finish: Callable[[float], None] | None = None) -> ReplayResult:
        eng, ready = self.engine, self.ready
        now = ready[0][0] if ready else 0.0
        while ready or eng.has_work():
            while ready and ready[0][0] <= now:
                at, order, req, arrival, waited = heapq.heappop(ready)
                if not waited:  # the front end's share taken by the others' streaming, as it was on arrival
                    extra = self.dep.frontend_wait(req.prompt_tokens, self.streamed_at(arrival))
                    heapq.heappush(ready, (at + extra, order, req, arrival, True))
                    continue
                self.arrival[req.request_id] = arrival
                eng.add_request(req, now)
            if not eng.has_work():
                now = ready[0][0]
                continue
            step = eng.step(now)
            now = step.start + step.duration
            self.steps.append((step.start, step.duration, step.decode_seqs))
            if self.per_streamed > 0.0 and step.duration > 0.0:
                streaming = max(0, step.decode_seqs - len(step.finished))
                self.streams.append((step.start, now, streaming / step.duration))
            if self.pending:  # first tokens held back by ttft_steps, one step at a time
                self.pending = [(rid, left - 1) for rid, left in self.pending]
                for rid, left in self.pending:
                    if left < 1:
                        self.first[rid] = now
                self.pending = [(rid, left) for rid, left in self.pending if left >= 1]
            hold = self.ttft_steps + (self.busy_steps if step.decode_seqs else 0.0)
            for rid in step.first_token:
                if hold >= 1:
                    self.pending.append((rid, hold))
                else:
                    self.first[rid] = now
            for done in step.finished:
                rid = done.request_id
                self.timings.append(Timing(self.arrival.pop(rid), self.first.pop(rid, now), now, done.output_tokens))
                if on_finish is not None:
                    on_finish(now)
        return ReplayResult(tuple(self.timings), eng.stats().num_preemptions, tuple(self.steps))


def open_arrivals(dep: Deployment, config: EngineConfig, n: int, lengths: LengthDraw, rate: float = 0.0,
                  seed: int = 0) -> ReplayResult:
    """``n`` requests arriving at ``rate`` per second (Poisson), or all at t = 0 when ``rate`` is 0.

    A first token reaches the client ``config.output_lag_steps`` steps after the step that sampled it
    (the engine applies it: vLLM V0's asynchronous output processor, 1)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    rng = random.Random(seed)
    driver = _Driver(dep, config)
    t = 0.0
    for i in range(n):
        if rate > 0 and i:
            t += rng.expovariate(rate)
        prompt, output = lengths(rng)
        driver.submit(Request(str(i), prompt, output), t)
    return driver.run()


def closed_loop(dep: Deployment, config: EngineConfig, concurrency: int, n: int, lengths: LengthDraw,
                seed: int = 0, output_spread: float = 0.0, start: ClientStart = "staggered") -> ReplayResult:
    """``concurrency`` clients send ``n`` requests in all, each the moment its previous one ends.

    ``start`` is how the clients begin:

    * ``"together"``: every client sends its first request at t = 0, as AIPerf's concurrency mode and
      ``vllm bench serve --max-concurrency`` do.  The engine then decides whether they stay locked.
      With every length fixed they do: requests prefilled in one step finish in one step and return
      together; a group whose prompts take several chunked steps gets its first tokens a few steps
      apart, but every running request decodes a token in each of those steps, so they finish those
      few steps apart, return within the next prefill and queue behind it again.  A jitter of a few
      milliseconds at the start changes nothing: the first queue re-forms the groups.
    * ``"staggered"``: client ``i`` starts at ``i / concurrency`` of one request's time at this load (the
      front end, the prefill and the decode steps of the whole batch), so no group forms at the start.

    ``output_spread`` s draws each output length uniformly within ±s of the drawn one (seeded); with
    every length equal no request ever leaves the group it finished in.
    """
    if concurrency < 1 or n < 1:
        raise ValueError("concurrency and n must be >= 1")
    if start not in ("staggered", "together"):
        raise ValueError(f"unknown client start {start!r}")
    rng = random.Random(seed)
    driver = _Driver(dep, config)
    sent = 0

    def send(at: float) -> None:
        nonlocal sent
        if sent < n:
            prompt, output = lengths(rng)
            if output_spread > 0:
                output = max(1, round(output * (1.0 + rng.uniform(-output_spread, output_spread))))
            driver.submit(Request(str(sent), prompt, output), at)
            sent += 1

    clients = min(concurrency, n)
    if start == "together":
        starts = [0.0] * clients
    else:
        prompt0, output0 = lengths(random.Random(seed))
        batch = min(concurrency, config.max_num_seqs)
        cycle = (dep.frontend_time(prompt0) + dep.prefill_time(prompt0)
                 + (output0 - 1) * dep.decode_step_time(batch, int(batch * (prompt0 + output0 / 2))))
        starts = [i * cycle / concurrency for i in range(clients)]
    for at in starts:
        send(at)
    return driver.run(on_finish=send)


def fixed(prompt: int, output: int) -> LengthDraw:
    return lambda _rng: (prompt, output)


def uniform(max_prompt: int, max_output: int) -> LengthDraw:
    """Lengths drawn uniformly from 1..max (``bench_serving --random-range-ratio 0``)."""
    return lambda rng: (rng.randint(1, max_prompt), rng.randint(1, max_output))


def lognormal(mean_prompt: int, mean_output: int, sigma: float) -> LengthDraw:
    """Lengths drawn from log-normals of these means and log-spread ``sigma``, kept as ``bench_serving``
    keeps ShareGPT's conversations: each at least 4 tokens, the prompt at most 1,024, both at most 2,048."""
    mu_p, mu_o = math.log(mean_prompt) - sigma**2 / 2.0, math.log(mean_output) - sigma**2 / 2.0

    def draw(rng: random.Random) -> tuple[int, int]:
        prompt = min(1024, max(4, round(rng.lognormvariate(mu_p, sigma))))
        return prompt, min(2048 - prompt, max(4, round(rng.lognormvariate(mu_o, sigma))))
    return draw


def burst(dep: Deployment, config: EngineConfig, n: int, prompt: int, output: int) -> ReplayResult:
    """``n`` requests of ``prompt``/``output`` tokens sent at once (the finite-burst question)."""
    return open_arrivals(dep, config, n, fixed(prompt, output))


__all__: Sequence[str] = ("ClientStart", "ReplayResult", "Timing", "burst", "closed_loop", "fixed", "lognormal",
                          "open_arrivals", "uniform")
