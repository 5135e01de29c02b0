"""The priority holdback's headroom: how many slots the lower tiers leave free so that a Turbo
arrival starts at once instead of waiting for a completion (the staffing maths, and the rate
estimates it is sized on).  Pure: callers pass ``now``."""

from __future__ import annotations

import functools
import math

from turbogate.sched.concurrency import LOWER_TIERS_BAR
from turbogate.sched.surge import ArrivalPace

#: Time constant (s) of the top tier's arrival rate and the pool's completion rate.
RATE_TAU_S = 10.0
#: The holdback ends when the top tier has been silent this many of its mean gaps (and at least
#: ``QUIET_MIN_S``): a Poisson stream is that quiet by chance e^-10 ≈ 0.005 % of the time (at
#: e^-5 the headroom went to the lower tiers often enough to double Turbo's p95 at 2× overload:
#: it comes back only as requests complete), while a stream that stopped would otherwise keep
#: slots idle until its decaying rate estimate fell, some 40 s after a few requests a second.
QUIET_GAPS = 10.0
QUIET_MIN_S = 5.0


def whole_slots(share: float, slots: int) -> int:
    """``share`` of ``slots`` in whole slots, at least one: on a 2-slot pool 85 % keeps one slot
    free, on a 1-slot pool the tier can still run (epsilon: 0.29 × 100 must give 29, not 28)."""
    return max(1, math.floor(share * slots + 1e-9))


class Rate:
    """Events per second, an exponentially decaying average over ``RATE_TAU_S``."""

    __slots__ = ("at", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.at = 0.0

    def add(self, now: float) -> None:
        self.value = self.read(now) + 1.0 / RATE_TAU_S
        self.at = now

    def read(self, now: float) -> float:
        dt = now - self.at
        # 0.0 decays to 0.0: a tier nobody asks for costs no exp on every dispatch.
        return self.value * math.exp(-dt / RATE_TAU_S) if dt > 0 and self.value else self.value


def headroom_slots(top_rate: float, completion_rate: float, risk: float, most: int, staffing: bool = True) -> int:
    """Slots to keep free for the top tier so that an arrival finds none with probability about
    ``risk``; the larger of two bounds.

    * Kept-free slots are used by top-tier arrivals and given back by completions (lower tiers do
      not refill them): a birth–death chain whose empty state has probability about
      ρ^R (1 − ρ) with ρ = arrivals / completions; hence R = ln(risk / (1 − ρ)) / ln ρ.
    * ``staffing``: that chain assumes completions come at the pool's mean rate.  They do not when
      service times are alike (a fixed output length): the lower tiers refill whatever Turbo
      leaves, and their requests free nothing for a whole service time, so Turbo's own in-flight
      count must be able to grow by its natural swing over that time.  It is about Poisson with
      mean a = λ × service (Little's law), and square-root staffing (Halfin–Whitt) gives the spare
      slots: β √a, with β the one whose delay probability is ``risk``.  Without it Turbo's p95 at
      2× overload reached 1.55× its unloaded value in simulation and 3–25× in real runs.  It costs
      the lower tiers throughput (4 % of goodput in docs/sim.md's 2× table; 11 % in the knee
      guard's small pools, whose guard caps Turbo's load itself: see ``Flow``).
    """
    if top_rate <= 0.0 or completion_rate <= 0.0:  # no evidence yet: the static line alone
        return 0
    if completion_rate <= top_rate:
        return most
    rho = top_rate / completion_rate
    chain = math.ceil(math.log(risk / (1.0 - rho)) / math.log(rho))
    if not staffing:
        return min(most, max(0, chain))
    offered = top_rate * most / completion_rate  # λ × service, as completion_rate = slots / service
    return min(most, max(0, chain, math.ceil(staffing_beta(risk) * math.sqrt(offered))))


@functools.lru_cache(maxsize=8)
def staffing_beta(risk: float) -> float:
    """β with Halfin–Whitt delay probability [1 + β Φ(β) / φ(β)]⁻¹ = ``risk`` (bisection; the
    probability falls as β grows).  0.05 gives about 1.74, 0.02 about 2.12.  Cached: the risk is a
    setting, and the holdback and Turbo's supply read β on every dispatch."""
    def delay(beta: float) -> float:
        cdf = 0.5 * (1.0 + math.erf(beta / math.sqrt(2.0)))
        pdf = math.exp(-beta * beta / 2.0) / math.sqrt(2.0 * math.pi)
        return 1.0 / (1.0 + beta * cdf / pdf)
    lo, hi = 0.0, 6.0
    for _ in range(50):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if delay(mid) > risk else (lo, mid)
    return hi


class Headroom:
    """One pool's view of Turbo's demand, and the slots kept free for it.  ``risk``: the chance
    a Turbo arrival finds none free; ``staffing``: keep room for Turbo's own swing too
    (``headroom_slots``)."""

    __slots__ = ("arrivals", "pace", "risk", "staffing")

    def __init__(self, risk: float, staffing: bool) -> None:
        self.risk = risk
        self.staffing = staffing
        self.arrivals = Rate()  # the top tier's
        self.pace = ArrivalPace()  # follows a surge faster than ``arrivals`` (sched/surge.py)

    def arrived(self, top: bool, now: float) -> None:
        if top:
            self.arrivals.add(now)
        self.pace.arrived(top, now)

    def top_rate(self, now: float, slots: int, saturated_service_s: float | None) -> float:
        """The top tier's rate the headroom is sized for (sched/surge.py ``ArrivalPace``).
        ``saturated_service_s``: the service time while the lower tiers queue, when the pool is
        saturated, so all arrivals come at least as fast as it completes, and Turbo's share of
        them at least that share of its completions."""
        service = saturated_service_s
        floor = self.pace.share * slots / service if service else 0.0
        return self.pace.top_rate(now, max(self.arrivals.read(now), floor))

    def asked(self, now: float, top_rate: float) -> bool:
        """Is Turbo being asked for?  Some recent rate (about one request in ``RATE_TAU_S`` /
        2), and not silent for ``QUIET_GAPS`` of its own mean gaps: no headroom for a tier that
        stopped (it would only idle)."""
        if top_rate * RATE_TAU_S < 0.5:
            return False
        # The gap is measured on the rate as it was at the last arrival: the estimate decays
        # through the silence, and a window drawn on it would widen as the silence goes on.
        arrivals = self.arrivals
        return now - arrivals.at <= max(QUIET_MIN_S, QUIET_GAPS / arrivals.value)

    def fits(self, now: float, service_s: float | None, slots: float) -> bool:
        """Do all arrivals fit in ``slots`` by Little's law (their rate × ``service_s``)?"""
        return service_s is not None and service_s > 0.0 and self.pace.total_rate(now) * service_s < slots

    def room(self, now: float, top_rate: float, base: int, service_s: float | None, learning: bool) -> int:
        """Turbo's headroom of ``base`` slots.  While ``learning``, no more than the share of
        them above slow start's bar (sched/concurrency.py ``LOWER_TIERS_BAR``): a slow start grows
        only once its engine ran that share of its limit, which the lower tiers alone must be able
        to reach.  A wider headroom stalls it above the engine's batch, the slots it counts whole
        there are no engine's, and Turbo waits for them at 2× overload."""
        room = self.slots(now, top_rate, base, service_s)
        if learning:
            return min(room, whole_slots(1.0 - LOWER_TIERS_BAR, base))
        return room

    def slots(self, now: float, top_rate: float, slots: int, service_s: float | None) -> int:
        """The slots of ``slots`` to keep free for a top tier arriving at ``top_rate``."""
        return headroom_slots(top_rate, self._replenish_rate(slots, service_s), self.risk, slots, self.staffing)

    @staticmethod
    def _replenish_rate(slots: int, service_s: float | None) -> float:
        """How fast kept-free slots come back: the completions a full pool of ``slots`` makes
        (slots ÷ service time), not the completions seen — those fall as the holdback grows, and
        a reserve sized on them would grow further, a spiral.  Zero (no evidence: the static
        line alone) until the service time is measured: a cold pool's first seconds see a
        handful of completions whatever its size, and a reserve sized on them was the whole
        pool — a cold gateway at a fifth of capacity held the lower tiers back for seconds."""
        if service_s is not None and service_s > 0:
            return slots / service_s
        return 0.0
