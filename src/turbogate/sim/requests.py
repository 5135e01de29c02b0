"""The simulated requests: bench's schedule, drawn lazily and without prompt text (pure).

``bench`` builds its whole schedule up front (:func:`turbogate.bench.arrivals.build_schedule`):
first every send time from the seeded RNG, then one :meth:`Workload.make` per request.  A
simulator of a large fleet cannot hold a million prompts, so :func:`sim_requests` makes the
same draws from the same RNG in the same order but keeps only token counts: the send times
come from bench's own :func:`send_times`, and a synthetic prompt's text, which has its own
generator seeded by one draw of the main one, costs the simulator just that draw.
tests/sim/test_requests.py holds the two equal, request by request, so one seed gives the same
requests in bench and sim.

Prompt tokens are counted as the emulator counts them (four characters per token, Llama 3
chat framing), so a simulated replica sees what an emulated one would.
"""

from __future__ import annotations

import bisect
import random
from array import array
from collections.abc import Iterator
from typing import NamedTuple

from turbogate.bench.arrivals import send_times
from turbogate.bench.options import LoadOptions
from turbogate.bench.shapes import Constant
from turbogate.bench.workload import Workload
from turbogate.emulator.tokens import BOS_TOKENS, CHAT_ASSISTANT_HEADER, CHAT_MESSAGE_OVERHEAD, CharEstimator
from turbogate.engine.lengths import output_length
from turbogate.results import Step
from turbogate.trace.replay import Replay, engine_tokens, replay_draws, text_tokens


class SimRequest(NamedTuple):
    id: int
    t: float  # scheduled send time, seconds from run start
    step: int
    offered_rps: float
    prompt_tokens: int  # as the engine counts them
    max_tokens: int
    output_tokens: int  # what the engine will produce (max_tokens unless EOS comes first)
    finish_reason: str  # "length" | "stop"
    tier: str | None
    api_key: int | None
    seed: int | None


def _framed(text_tokens: int, chat: bool) -> int:
    if chat:
        return BOS_TOKENS + CHAT_MESSAGE_OVERHEAD + text_tokens + CHAT_ASSISTANT_HEADER
    return BOS_TOKENS + text_tokens


class RequestSource:
    """The run's requests in send order, drawn lazily; ``len()`` is known up front."""

    def __init__(self, load: LoadOptions, *, chat: bool = True, ignore_eos: bool = True,
                 min_tokens: bool = False) -> None:
        self.rng = random.Random(load.random_seed)
        self._trace = load.trace if load.shape == "trace" else None
        self._seed = load.random_seed
        if self._trace is None:
            shape, steps = load.shape_and_steps()
        else:  # a replayed trace: its steps and times instead of a shape's (whose rate is then unused)
            shape, steps = Constant(1.0, load.duration_s), list(self._trace.steps)
        self.steps: list[Step] = steps
        self._shape = shape
        # Send times first, from bench's own code: the RNG then stands where bench's does.
        self.times = array("d", send_times(shape, load.arrivals, self.rng) if self._trace is None
                           else (item.t for item in self._trace.items))
        self._starts = [s.start_s for s in self.steps]
        self._workload = load.workload
        self._chat = chat
        self._ignore_eos = ignore_eos
        self._min_tokens = min_tokens

    def __len__(self) -> int:
        return len(self.times)

    def rate_at(self, t: float) -> float:
        """The offered rate (all tiers) at ``t`` seconds into the run."""
        if self._trace is not None:
            return self.steps[min(len(self.steps) - 1, int(t / self.steps[0].duration_s))].offered_rps
        return self._shape.rate_at(t)

    def _replayed(self, replay: Replay) -> Iterator[SimRequest]:
        """The trace's requests with bench's draws (trace/replay.py): the prompt the engine counts from
        the text bench would send, the output the emulator would give."""
        chat, n_keys = self._chat, self._workload.n_api_keys
        for i, (item, step, _, seed) in enumerate(replay_draws(replay, self._seed,
                                                               self._workload.per_request_seed)):
            max_tokens = max(1, item.output_tokens)
            out = output_length(seed if seed is not None else i, max_tokens,
                                min_tokens=max_tokens if self._min_tokens else 0, ignore_eos=self._ignore_eos)
            yield SimRequest(i, item.t, step.index, step.offered_rps,
                             engine_tokens(text_tokens(item.prompt_tokens, chat), chat), max_tokens, out,
                             "length" if out >= max_tokens else "stop", item.tier, replay.api_key(item, n_keys), seed)

    def __iter__(self) -> Iterator[SimRequest]:
        if self._trace is not None:
            yield from self._replayed(self._trace)
            return
        w: Workload = self._workload
        rng = self.rng
        shape = self._shape
        starts = self._starts
        steps = self.steps
        chat = self._chat
        est = CharEstimator()
        dataset_tokens: dict[int, int] = {}
        only_step = steps[0].index if len(steps) == 1 else None  # (the common case, without the search)
        for i, t in enumerate(self.times):
            if w.dataset:
                j = rng.randrange(len(w.dataset))
                if j not in dataset_tokens:
                    dataset_tokens[j] = est.count(w.dataset[j])
                prompt = _framed(dataset_tokens[j], chat)
            else:
                hint = w.prompt_tokens.sample(rng)
                rng.getrandbits(64)  # the seed of the prompt's own generator (bench/workload.py)
                prompt = _framed(max(1, hint), chat)  # the text is exactly 4 × hint characters
            max_tokens = w.output_tokens.sample(rng)
            tier = w.tiers.pick(rng)
            api_key = rng.randrange(w.n_api_keys) if w.n_api_keys else None
            seed = rng.randrange(2**31) if w.per_request_seed else None
            # The emulator draws from the request's seed (else from its own counter: here the id).
            out = output_length(seed if seed is not None else i, max_tokens,
                                min_tokens=max_tokens if self._min_tokens else 0, ignore_eos=self._ignore_eos)
            step = only_step if only_step is not None else steps[max(0, bisect.bisect_right(starts, t) - 1)].index
            yield SimRequest(i, t, step, shape.rate_at(t), prompt, max_tokens, out,
                             "length" if out >= max_tokens else "stop", tier, api_key, seed)
