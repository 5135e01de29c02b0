"""The rate one engine completes requests at saturation, measured by running it (pure).

The closed form (``perf.saturation``) is a steady-state bound; this drives the stepped engine
itself in virtual time with its queue kept full, so tests and benchmarks can state "capacity"
from the very model the emulator and the simulator run.
"""

from __future__ import annotations

from turbogate.engine.loop import EngineLoop
from turbogate.engine.scheduler import Engine
from turbogate.engine.types import EngineConfig, Request
from turbogate.perf import Deployment


def saturated_rate(deployment: Deployment, config: EngineConfig, prompt_tokens: int, output_tokens: int,
                   completions: int = 400) -> float:
    """Completions per virtual second of one engine whose queue never runs dry, measured over
    the second half of ``completions`` (the first half fills the pipe)."""
    loop = EngineLoop(Engine(deployment, config))
    backlog = max(8, 2 * config.max_num_seqs)
    n = 0
    for _ in range(backlog):
        loop.submit(Request(f"r{n}", prompt_tokens, output_tokens), 0.0)
        n += 1
    done: list[float] = []
    t = 0.0
    while len(done) < completions:
        t = loop.next_time() or t
        for _finished in loop.advance(t).finished:
            done.append(t)
            loop.submit(Request(f"r{n}", prompt_tokens, output_tokens), t)
            n += 1
    half = completions // 2
    return (completions - 1 - half) / (done[-1] - done[half])
