"""Emulated continuous-batching engine on the ``perf`` roofline model (pure, stepped).

``Engine(deployment, EngineConfig(...))``; ``add_request(Request(...), now)``; ``step(now)``
returns a :class:`StepResult` whose events take effect ``duration`` seconds later.
"""

from turbogate.engine.blocks import BlockManager
from turbogate.engine.scheduler import Engine, RequestTooLarge
from turbogate.engine.types import EngineConfig, EngineStats, FinishReason, Policy, Request, StepResult, TokenEvent

__all__ = [
    "BlockManager",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "FinishReason",
    "Policy",
    "Request",
    "RequestTooLarge",
    "StepResult",
    "TokenEvent",
]
