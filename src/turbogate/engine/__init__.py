"""Emulated continuous-batching engine on the ``perf`` roofline model (pure, stepped).

``Engine(deployment, EngineConfig(...))``; ``add_request(Request(...), now)``; ``step(now)``
returns a :class:`StepResult` whose effects take place ``duration`` seconds later.
:class:`EngineLoop` runs an engine in virtual time; :mod:`turbogate.engine.lengths` draws
output lengths.
"""

from turbogate.engine.blocks import BlockManager
from turbogate.engine.lengths import NATURAL_MAX_TOKENS, default_max_tokens, finish_reason, output_length
from turbogate.engine.loop import EngineLoop
from turbogate.engine.scheduler import Engine, RequestTooLarge
from turbogate.engine.types import EngineConfig, EngineStats, Finished, FinishReason, Policy, Request, StepResult

__all__ = [
    "NATURAL_MAX_TOKENS",
    "BlockManager",
    "Engine",
    "EngineConfig",
    "EngineLoop",
    "EngineStats",
    "FinishReason",
    "Finished",
    "Policy",
    "Request",
    "RequestTooLarge",
    "StepResult",
    "default_max_tokens",
    "finish_reason",
    "output_length",
]
