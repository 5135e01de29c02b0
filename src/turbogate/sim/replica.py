"""One simulated engine replica: an Engine on the perf model, its virtual-time loop, its links."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from turbogate.engine import Engine, EngineConfig, EngineLoop
from turbogate.engine.busy import BusyFractions, BusyWindow
from turbogate.perf import Deployment, deployment, get_gpu, resolve_model
from turbogate.perf.profiles import get_profile
from turbogate.sim.fleet import ReplicaGroup

if TYPE_CHECKING:
    from turbogate.sim.core import Call

#: DCGM's averaging window, as the emulator's (one second).
DCGM_WINDOW_S = 1.0


def group_deployment(g: ReplicaGroup) -> Deployment:
    gpu = get_gpu(g.gpu)
    if g.gpu_bw_efficiency is not None or g.gpu_mfu is not None:  # measured by `turbogate plan profile`
        gpu = replace(gpu, bw_efficiency=g.gpu_bw_efficiency or gpu.bw_efficiency, mfu=g.gpu_mfu or gpu.mfu)
    return deployment(gpu, resolve_model(g.model), tp=g.tp, weight_dtype=g.dtype, kv_dtype=g.kv_cache_dtype,
                      gpu_mem_util=g.gpu_memory_utilization, factors=get_profile(g.engine_profile).factors)


class SimReplica:
    """Engine + loop + which calls it holds.  ``crash()`` loses them all and restarts it empty."""

    __slots__ = ("config", "dcgm", "delay", "deployment", "down", "frozen", "gen", "id", "loop", "max_model_len",
                 "on", "pool", "scraped")

    def __init__(self, rid: str, pool: str, dep: Deployment, config: EngineConfig, *, delay_s: float,
                 scraped: bool = True) -> None:
        self.id = rid
        self.pool = pool
        self.deployment = dep
        self.config = config
        self.delay = delay_s  # one way, gateway ↔ replica
        self.scraped = scraped
        self.down = False
        self.frozen = False  # takes requests, answers nothing (sim/core.py ``_freeze``)
        self.gen = 0  # bumped by a crash: news from the old engine is dropped
        self.on: dict[str, Call] = {}
        self.loop = EngineLoop(Engine(dep, config))
        self.dcgm: BusyWindow | None = BusyWindow(DCGM_WINDOW_S)  # DCGM's averaging of its engine's busy shares
        # What the emulator would accept: the model's context, at most the whole KV cache.
        self.max_model_len = min(dep.model.max_context, self.loop.engine.max_tokens_per_request)

    def crash(self) -> list[Any]:
        """Go down now: every request held breaks, and the engine restarts empty on recovery."""
        self.down = True
        self.gen += 1
        broken = list(self.on.values())
        self.on = {}
        self.loop = EngineLoop(Engine(self.deployment, self.config))
        self.dcgm = None  # the new engine's window starts at its first reading
        return broken

    def busy_fractions(self, now: float) -> BusyFractions:
        """What DCGM reports of its GPU at ``now`` (as the emulator exports it: engine/busy.py)."""
        if self.dcgm is None:
            self.dcgm = BusyWindow(DCGM_WINDOW_S, start=now)
        return self.dcgm.read(self.loop.engine.busy.totals(now))
