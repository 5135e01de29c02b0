"""The knee guard: stop over-granting Turbo past the fleet's knee, by itself (pure).

Turbo pays only below the knee: past it, priority for some means collapse for the rest, and
Turbo's own latency rises too.  The guard watches the offered load of a pool against its knee
and moves between three states, with hysteresis (separate enter and leave thresholds) and a
minimum dwell in each state:

* **open** — every Turbo request the tenant is entitled to is granted;
* **capped** — Turbo grants pass a token bucket whose rate is ``turbo_share`` of the knee (the
  Turbo load the fleet can carry at priority and still keep its SLO); the excess is served
  Standard, and the answer says why;
* **closed** — all Turbo is served Standard until the load falls.

An admin override (``force``) pins the state either way.  Every change is kept as an event with
the signals that caused it, for ``GET /admin/events``.

Knee sources, in the order a deployment usually has them: a run folder from ``bench`` or
``sim`` (its measured knee), the planner's prediction for the pool's hardware and model, a
fixed value from the config, or an estimate learnt online from live signals
(sched/knee_online.py; the guard stays open until it first sees the pool saturate).
``KneeSource`` names the one in force.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from turbogate.sched.knee_online import OnlineKnee, OnlineKneePolicy


class GuardState(StrEnum):
    OPEN = "open"
    CAPPED = "capped"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class KneeSource:
    """Where the knee comes from: ``run`` (a bench/sim run folder), ``planner``, ``config``, or
    ``online`` (learnt from live signals: ``knee_rps`` is then unused)."""

    kind: str
    knee_rps: float
    detail: str = ""


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    """Thresholds are offered load ÷ knee."""

    enter_capped: float = 0.9
    leave_capped: float = 0.8
    # Closed only far past the knee: capped already holds Turbo to a rate that keeps its SLO at
    # 2× the knee (benchmarks/guard_abc.py); closing there would only move Turbo into Standard's queue.
    enter_closed: float = 3.0
    leave_closed: float = 2.5
    min_dwell_s: float = 10.0
    turbo_share: float = 0.3  # capped: Turbo grants per second at most this share of the knee
    burst_s: float = 2.0  # the bucket holds this many seconds of its rate
    rate_tau_s: float = 10.0  # time constant of the offered-load estimate
    online: OnlineKneePolicy = field(default_factory=OnlineKneePolicy)  # knee source "online"

    def __post_init__(self) -> None:
        if not 0 < self.leave_capped < self.enter_capped <= self.leave_closed < self.enter_closed:
            raise ValueError("guard thresholds must satisfy 0 < leave_capped < enter_capped <= leave_closed "
                             "< enter_closed")
        if not 0 < self.turbo_share <= 1:
            raise ValueError("turbo_share must be in (0, 1]")


@dataclass(frozen=True, slots=True)
class GuardEvent:
    at: float
    before: GuardState
    after: GuardState
    load_rps: float
    knee_rps: float
    why: str


@dataclass(slots=True)
class KneeGuard:
    """One pool's guard.  Feed it every arrival (``observe``) and ask it per Turbo request
    (``grant``); both take ``now``."""

    source: KneeSource
    policy: GuardPolicy = field(default_factory=GuardPolicy)
    state: GuardState = GuardState.OPEN
    force: GuardState | None = None  # the admin override
    since: float = 0.0
    events: list[GuardEvent] = field(default_factory=list)
    _rate: float = 0.0
    _rate_at: float = 0.0
    _tokens: float = 0.0
    _tokens_at: float = 0.0
    online: OnlineKnee | None = None  # the estimator, for knee source "online"

    def __post_init__(self) -> None:
        if self.source.kind == "online" and self.online is None:
            self.online = OnlineKnee(self.policy.online)

    def knee(self, now: float) -> float | None:
        """The knee in force (req/s, all tiers); ``None`` while an online estimate is still learning."""
        if self.online is None:
            return self.source.knee_rps
        return self.online.knee(now, capped=self.state is not GuardState.OPEN)

    # ---- signals -------------------------------------------------------------------------
    def load_rps(self, now: float) -> float:
        """Offered requests per second, all tiers (an exponentially decaying average)."""
        dt = now - self._rate_at
        return self._rate * math.exp(-dt / self.policy.rate_tau_s) if dt > 0 else self._rate

    def observe(self, now: float) -> None:
        """A request of the pool arrived (any tier)."""
        self._rate = self.load_rps(now) + 1.0 / self.policy.rate_tau_s
        self._rate_at = now
        if self.online is not None:
            self.online.arrived(now)
        self._update(now)

    # The flow's other events, for the online estimate (no-ops for a fixed knee).
    def dispatched(self, turbo: bool, queue_s: float, now: float) -> None:
        if self.online is not None:
            self.online.dispatched(turbo, queue_s, now)

    def first_byte(self, turbo: bool, ttft_s: float, now: float) -> None:
        if self.online is not None:
            self.online.first_byte(turbo, ttft_s, now)

    def completed(self, now: float) -> None:
        if self.online is not None:
            self.online.completed(now)

    def scraped(self, replica: str, kv_usage: float | None, waiting: float | None) -> None:
        if self.online is not None:
            self.online.scraped(replica, kv_usage, waiting)

    # ---- states ----------------------------------------------------------------------------
    def current(self, now: float) -> GuardState:
        self._update(now)
        return self.force or self.state

    def _update(self, now: float) -> None:
        if self.force is not None or now - self.since < self.policy.min_dwell_s:
            return
        p = self.policy
        load = self.load_rps(now)
        knee = self.knee(now)
        if knee is None:  # an online estimate still learning: nothing to guard against yet
            return
        x = load / knee if knee > 0 else math.inf
        target = self.state
        if self.state is GuardState.OPEN:
            if x >= p.enter_closed:
                target = GuardState.CLOSED
            elif x >= p.enter_capped:
                target = GuardState.CAPPED
        elif self.state is GuardState.CAPPED:
            if x >= p.enter_closed:
                target = GuardState.CLOSED
            elif x < p.leave_capped:
                target = GuardState.OPEN
        elif x < p.leave_capped:
            target = GuardState.OPEN
        elif x < p.leave_closed:
            target = GuardState.CAPPED
        if target is not self.state:
            why = f"load {x:.2f}× the knee"
            if self.online is not None:
                why += f" (online: {'; '.join(self.online.reasons) or 'no saturation signal'})"
            self._move(now, target, load, knee, why)

    def _move(self, now: float, target: GuardState, load: float, knee: float, why: str) -> None:
        self.events.append(GuardEvent(now, self.state, target, load, knee, why))
        if len(self.events) > 1000:
            del self.events[:500]
        self.state = target
        self.since = now
        if target is GuardState.CAPPED:  # a full bucket on entry: the cap, not a sudden stop
            self._tokens = self.policy.turbo_share * knee * self.policy.burst_s
            self._tokens_at = now

    def override(self, state: GuardState | None, now: float) -> None:
        """Pin the guard (the admin hot switch), or hand it back to the load (``None``)."""
        before = self.force or self.state
        self.force = state
        after = state or self.state
        if after is not before:
            self.events.append(GuardEvent(now, before, after, self.load_rps(now), self.knee(now) or 0.0,
                                          "admin override" if state else "admin released the override"))

    # ---- decisions ---------------------------------------------------------------------------
    def grant(self, now: float) -> str | None:
        """None when a Turbo request may be served Turbo now; else the reason it is served
        Standard (``knee_guard_capped`` or ``knee_guard_closed``)."""
        state = self.current(now)
        if state is GuardState.OPEN:
            return None
        if state is GuardState.CLOSED:
            return "knee_guard_closed"
        rate = self.policy.turbo_share * (self.knee(now) or 0.0)
        cap = rate * self.policy.burst_s
        self._tokens = min(cap, self._tokens + (now - self._tokens_at) * rate)
        self._tokens_at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return None
        return "knee_guard_capped"

    def describe(self, now: float) -> dict[str, object]:
        knee = self.knee(now)
        out: dict[str, object] = {
            "state": self.current(now).value, "forced": self.force is not None,
            "knee_rps": None if knee is None else round(knee, 3), "knee_source": self.source.kind,
            "knee_detail": self.source.detail, "load_rps": round(self.load_rps(now), 3), "since": self.since}
        if self.online is not None:
            out["online"] = self.online.describe(now)
        return out
