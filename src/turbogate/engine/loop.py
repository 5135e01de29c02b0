"""The engine's loop in virtual time: a step starts when work reaches an idle engine or when the
previous step ends.  A driver (the simulator's event loop, or the emulator's real-time runner)
calls :meth:`EngineLoop.advance` at :meth:`EngineLoop.next_time`.
"""

from __future__ import annotations

from turbogate.engine.scheduler import Engine
from turbogate.engine.types import Request, StepResult


class EngineLoop:
    """One Engine run in virtual time: a step starts when work arrives at an idle engine or when the
    previous step ends."""

    __slots__ = ("_end", "engine")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._end: float | None = None

    def submit(self, req: Request, now: float) -> None:
        """Queue ``req`` at ``now`` (raises RequestTooLarge); an idle engine starts a step at ``now``."""
        self.engine.add_request(req, now)
        if self._end is None:
            self._end = now + self.engine.schedule(now)

    def abort(self, request_id: str, now: float) -> bool:
        """Drop a request; False if unknown or finished.  A step in flight still ends at next_time()."""
        return self.engine.abort(request_id)

    def next_time(self) -> float | None:
        """When the step in progress ends (None: idle)."""
        return self._end

    def advance(self, now: float) -> StepResult:
        """At ``now`` >= next_time(): return that step's result and start the next step if work remains."""
        end = self._end
        if end is None:
            raise RuntimeError("the engine is idle: no step to advance")
        if now < end:
            raise ValueError(f"advance({now}) before the step ends at {end}")
        result = self.engine.finish_step()
        self._end = now + self.engine.schedule(now) if self.engine.has_work() else None
        return result
