"""What keeps Turbo fast from the first second of a surge (pure, ``now`` passed in).

A load step from a fifth of capacity to twice it is the moment Turbo exists for, and what the
gateway learnt in the quiet minute before it is what meets it.  Two of those lessons go wrong:

* **Headroom sized on a quiet minute.**  The holdback keeps slots free for Turbo in proportion
  to Turbo's arrival rate, an average over ``RATE_TAU_S`` (sched/headroom.py).  At the step the
  lower tiers arrive ten times as fast and fill every free slot within about half a service
  time, long before that average has risen: Turbo then waits for completions.  ``ArrivalPace``
  reads the rate of *all* arrivals over the last few of them (a count, not a time window, so it
  reacts within a handful of arrivals at any load and time scale) and scales it by Turbo's
  long-run share of arrivals: the headroom follows a surge as fast as the surge comes.  And as
  fast when it goes: once Turbo's own last arrivals say its rate fell below that average, the
  headroom is sized on them (after a burst the average kept a third of the pool idle for ten to
  twenty seconds while Standard's backlog waited).  A step up is told once ten arrivals make it plain
  (``too_fast``; a tenfold step within its first ten arrivals in two draws of three), and the rate
  is read since it, not over a window reaching into the quiet minute.
* **A flood of prefills.**  The lower tiers' first dispatches after the step go out together,
  and an engine runs their prompts' prefills before a Turbo request's (its own queue is FIFO):
  Turbo's time to first token grows by several prefill steps although a slot was free for it.
  ``prefill_gate`` bounds the lower tiers' streams awaiting a first token per replica, so the
  engine's prefill backlog stays within about one step and Turbo joins the next one.  How many
  depends on what a prefill costs against a decode step, which the flow measures per replica
  (``prefill_sent``, ``prefill_left``, ``answer_paced``): where one prompt's prefill is several
  decode steps (512 tokens add 4.8 to an A100 step), one lower-tier prefill ahead of Turbo already
  costs it half its unloaded time to first token.  And none joins Turbo's own: while a Turbo
  stream awaits its first token at a replica, that replica takes no lower-tier stream
  (``lower_shut``; 256-token prompts on 4 × H100: a step of two prefills 26 ms, of one 16 ms).
  Where one lower-tier prefill is that dear, a Turbo request that finds one under way at every
  replica waits it out; so while the lower tiers queue or a surge is told, they leave the last
  replica with none of theirs under way to Turbo (``keeps_clear``), and Turbo's own supply is
  bounded by its prefills (sched/turbo_supply.py ``prefill_supply_rps``).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from turbogate.sched.replica import UNGATED, Health
from turbogate.sched.tiers import Tier

if TYPE_CHECKING:
    from turbogate.sched.actions import FlowRequest
    from turbogate.sched.replica import Replica

#: Arrivals the fast rate is measured over: few enough to follow a step within a second at
#: the benchmarks' rates, enough that one Poisson clump does not read as a surge for long.
PACE_WINDOW = 16
#: Arrivals a steady rate is measured over.  Sixteen Poisson arrivals give a rate within about
#: ±25 %, and the holdback reads it at every dispatch: where a pool takes a hundred arrivals a
#: second, sixteen span a tenth of a second, a dip in them opens the lower tiers' ceiling, and
#: what they take in that moment they hold for a whole service time (a 30 %-Turbo fleet of
#: 4 × 64 sequences in simulation: Turbo waited up to a second in the gateway, 25–59× its
#: unloaded TTFT).  So each rate (all arrivals', the top tier's own) is at least its rate over
#: the longest run of its last 32, 64, … ``PACE_LONGEST`` arrivals each of which the run half its
#: length bears out (no slower than it over ``RECENT_MARGIN``: a run that reaches back past a step
#: up reads slower and ends the search), and within ``RECENT_MARGIN`` of the last sixteen: a dip is not a
#: fall, and a fall (the end of a burst, another tier's batch gone by) is still followed at once.
#: The run grows with the evidence: right after a step it is the arrivals since the step (on a
#: slow fleet a fixed run reaches back into the quiet minute for seconds, and a dip in the
#: surge's first arrivals opens the ceiling), in a steady state up to 512 (±4 %).
PACE_LONGEST = 512
#: Arrivals between two choices of a steady run: a run a few arrivals stale still reads the rate
#: since a step (one reaching back past it reads slower, and the last sixteen's rate stays the
#: floor), and choosing costs a handful of rates.
RUN_EVERY = 8
#: Arrivals a step up is told by: so close together that Poisson arrivals at the rate of the
#: ``PACE_WINDOW`` before them would come that close with probability under
#: ``SURGE_FALSE_ALARM``.  Until then a window reaches back into the quiet minute: sixteen
#: arrivals after a tenfold step the rate still read a tenth to a quarter of it, and the lower
#: tiers took the slots Turbo was about to need and held them a service time.
SURGE_RUN = 10
SURGE_FALSE_ALARM = 1e-6
#: Arrivals after a step up read as one run (the rate since the step) before the usual windows;
#: back to those sooner once that run reads under ``SURGE_KEEP`` times the rate before it (a
#: clump of a steady rate, taken for a step: the arrivals after it bring its rate down).
SURGE_HOLD = 64
SURGE_KEEP = 2.0
#: Weight of one arrival in Turbo's long-run share of arrivals (about the last 500).
SHARE_ALPHA = 0.002
#: The top tier's rate over its last ``PACE_WINDOW`` arrivals is within about ±1/√16 of the
#: truth; the bound it gives the headroom is half again as much, so a lull in a steady rate
#: (a long gap among sixteen Poisson arrivals) seldom reads as a fall.
RECENT_MARGIN = 1.5
#: Weight of one sample in a replica's first-token time and time per output token.
TIMING_ALPHA = 0.1
#: Decode steps in a stream's ``first_s`` besides its prompt's work: on average half a running
#: step waited out, and the step that runs its prefill, decodes included.
PREFILL_STEP_SHARE = 1.5
#: What the lower tiers' prefills ahead of Turbo's may add to it, as a share of its unloaded TTFT
#: (the surge target is 1.5×).
TURBO_EXTRA_WAIT = 0.5

_TURBO = Tier.TURBO


def window_rate(times: deque[float], now: float, count: int = PACE_WINDOW) -> float | None:
    """Arrivals per second over the last ``count`` arrival ``times`` (oldest first) up to
    ``now``, or None before there are that many (or while they share one instant)."""
    n = len(times)
    if n < count:
        return None
    span = now - times[n - count]
    return (count - 1) / span if span > 0 else None


def too_fast(gaps: int, x: float) -> bool:
    """Whether ``gaps`` gaps between Poisson arrivals at rate 1 sum to less than ``x`` with a
    probability under ``SURGE_FALSE_ALARM`` (the Gamma CDF, 1 − e^−x Σ_{i<gaps} x^i / i!)."""
    if x >= gaps:  # no shorter than their mean: far from it (and the usual case, so no sum)
        return False
    term = total = 1.0
    for i in range(1, gaps):
        term *= x / i
        total += term
    return 1.0 - math.exp(-x) * total < SURGE_FALSE_ALARM


def longest_window(times: deque[float], now: float) -> int:
    """The longest run of the last 32, 64, … arrival ``times`` up to ``now`` each of which reads
    no slower than the run half its length (the first: the last ``PACE_WINDOW``) over
    ``RECENT_MARGIN`` (0: none; see ``PACE_LONGEST``)."""
    shorter = window_rate(times, now)
    if shorter is None:
        return 0
    found, count = 0, 2 * PACE_WINDOW
    while count <= len(times):
        rate = window_rate(times, now, count)
        if rate is None or rate * RECENT_MARGIN < shorter:
            break
        found, shorter = count, rate
        count *= 2
    return found


class Arrivals:
    """One stream's last ``PACE_LONGEST`` arrival times, and its steady run (``longest_window``),
    chosen every ``RUN_EVERY`` arrivals so that a read, at every dispatch, costs one rate and an
    arrival a fraction of a choice.  A step up (``SURGE_RUN`` arrivals too close together for the
    rate before them, ``too_fast``) anchors a run at its first arrival: until ``SURGE_HOLD``
    arrivals came after it, that run is the steady one, and the recent one while fewer than
    ``PACE_WINDOW`` did."""

    __slots__ = ("anchor", "before", "count", "run", "since", "times")

    def __init__(self) -> None:
        self.times: deque[float] = deque(maxlen=PACE_LONGEST)
        self.count = 0
        self.run = 0  # longest_window's, as of its last choice
        self.anchor = -1.0  # the first arrival of a step up (-1: none)
        self.since = 0  # arrivals from the anchor on
        self.before = 0.0  # the rate of the PACE_WINDOW arrivals before the anchor

    def add(self, now: float) -> None:
        times = self.times
        times.append(now)
        self.count += 1
        if self.anchor >= 0.0:
            self.since += 1
            if self.since >= SURGE_HOLD or self.since - 1 < SURGE_KEEP * self.before * (now - self.anchor):
                self.anchor = -1.0
        elif (n := len(times)) >= SURGE_RUN + PACE_WINDOW:
            first = times[n - SURGE_RUN]
            span = times[n - SURGE_RUN - 1] - times[n - SURGE_RUN - PACE_WINDOW]
            before = (PACE_WINDOW - 1) / span if span > 0.0 else 0.0
            if before > 0.0 and now > first and too_fast(SURGE_RUN - 1, before * (now - first)):
                self.anchor, self.since, self.before = first, SURGE_RUN, before
        if self.count % RUN_EVERY == 0:
            self.run = longest_window(times, now)

    def _since_step(self, now: float) -> float | None:
        """The rate since the anchor, or None without one."""
        if self.anchor < 0.0 or now <= self.anchor:
            return None
        return (self.since - 1) / (now - self.anchor)

    def recent(self, now: float) -> float | None:
        """Arrivals per second over the last ``PACE_WINDOW`` (``window_rate``), or since a step up
        while fewer than that came after it."""
        if self.anchor >= 0.0 and self.since < PACE_WINDOW:
            return self._since_step(now)
        return window_rate(self.times, now)

    def steady(self, now: float, recent: float | None = None) -> float:
        """The rate over the last ``PACE_WINDOW`` arrivals (``recent``, where the caller has it), or
        over the steady run (since a step up, where one is anchored) where that is more, but not
        more than ``RECENT_MARGIN`` times the first; 0 before there are ``PACE_WINDOW`` of them."""
        steady = self._since_step(now)
        if recent is None:  # as ``recent``, without reading the rate since a step twice
            recent = (steady if self.anchor >= 0.0 and self.since < PACE_WINDOW
                      else window_rate(self.times, now)) or 0.0
        if steady is None:
            steady = (window_rate(self.times, now, self.run) or 0.0) if self.run else 0.0
        if steady > RECENT_MARGIN * recent:
            steady = RECENT_MARGIN * recent
        return steady if steady > recent else recent


class ArrivalPace:
    """The recent rate of all arrivals, the top tier's long-run share of them, and the top tier's
    own arrivals (the last ``PACE_WINDOW`` of them to follow its rate down as fast as up; the run
    of them since its rate last changed for a steady floor under it): ``Arrivals`` each."""

    __slots__ = ("_all", "_top", "share")

    def __init__(self) -> None:
        self._all = Arrivals()
        self._top = Arrivals()
        self.share = 0.0

    def arrived(self, top: bool, now: float) -> None:
        every = self._all
        every.add(now)
        if top:
            self._top.add(now)
        # A plain mean over the first arrivals, then an exponential one: a quiet minute's few
        # arrivals already give the share a surge is scaled by.
        count = every.count
        alpha = 1.0 / count if count * SHARE_ALPHA < 1.0 else SHARE_ALPHA
        self.share += alpha * ((1.0 if top else 0.0) - self.share)

    def surging(self) -> bool:
        """Whether a step up in all arrivals was told and is still read since (``too_fast``)."""
        return self._all.anchor >= 0.0

    def recent_rate(self, now: float) -> float:
        """Arrivals per second over the last ``PACE_WINDOW`` of them; decays through a silence."""
        return self._all.recent(now) or 0.0

    def total_rate(self, now: float) -> float:
        """The recent rate, or the steady one where that is more (within ``RECENT_MARGIN`` of the
        recent: see ``PACE_LONGEST``)."""
        return self._all.steady(now)

    def top_rate(self, now: float, averaged: float) -> float:
        """The top tier's rate for the holdback: its ``averaged`` rate, or more while all arrivals
        come faster than that average accounts for (a surge); less once the top tier's own last
        arrivals say it fell below that average (after a burst of Turbo: an average over
        ``RATE_TAU_S`` kept the headroom sized for the burst for another ten to twenty seconds,
        a third of the pool idle while Standard's backlog waited).  Never less than its steady rate
        over its own last arrivals (``Arrivals.steady``): a dip in the last few of all
        arrivals is not a fall.  Its own last ``PACE_WINDOW`` arrivals bound it from above (their
        rate × ``RECENT_MARGIN``)."""
        own_arrivals = self._top
        recent = own_arrivals.recent(now)
        if recent is not None and RECENT_MARGIN * recent < averaged:
            averaged = RECENT_MARGIN * recent
        if self.share <= 0.0:
            return averaged
        fast = self.share * self._all.steady(now)
        own = own_arrivals.steady(now, recent or 0.0)
        if own > fast:
            fast = own
        return fast if fast > averaged else averaged


def prefill_gate(engine_seqs: int, first_s: float = 0.0, step_s: float = 0.0) -> int:
    """Most lower-tier streams that may await their first token at one replica at once.  Only for
    an engine whose batch is known: a slow start grows its limit on the lower tiers' traffic.

    An eighth of its batch (at least 2), so their prefills fit about one engine step; fewer where
    a prefill is dear.  ``first_s``: the replica's time to a first token for a stream sent while
    none awaited one there (about Turbo's unloaded TTFT: the rest of a decode step, then a step
    with its prefill); ``step_s``: its time per output token (a decode step).  A lower-tier
    prefill awaiting its first token adds ``first_s - 1.5 step_s`` to Turbo's (its share of a
    step), whether it runs in the step Turbo waits out or in Turbo's own: lower-tier prefills
    sent while a step runs wait in the engine's queue and join the next one with Turbo's.  So the
    gate lets through as many as half of ``first_s`` pays for, and at least one.  Without both
    measures, the eighth."""
    count = max(2, math.ceil(engine_seqs / 8))
    extra = first_s - PREFILL_STEP_SHARE * step_s
    if first_s <= 0.0 or step_s <= 0.0 or extra <= 0.0:
        return count
    return min(count, max(1, int(TURBO_EXTRA_WAIT * first_s / extra)))


def prefill_sent(replica: Replica, req: FlowRequest, now: float) -> None:
    """``req`` was sent to ``replica`` at ``now`` and awaits its first token (counted for L2)."""
    if req.stream:
        if replica.awaiting_first == 0:
            replica.lone = req.id  # nothing ahead of its prefill: its first token times the replica
        if req.served is not _TURBO:
            replica.lower_prefills += 1
        else:
            replica.turbo_prefills += 1
    replica.awaiting_first += 1
    replica.last_sent = now


def prefill_left(replica: Replica, req: FlowRequest) -> bool:
    """``req`` no longer awaits ``replica``'s first token: it came (``req.first_byte_at`` set), or
    the attempt ended without one.  Whether that opened the replica's gate."""
    replica.awaiting_first -= 1
    if not req.stream:
        return False
    shut = lower_shut(replica)
    if req.served is not _TURBO:
        replica.lower_prefills -= 1
    else:
        replica.turbo_prefills -= 1
    if replica.lone == req.id:
        replica.lone = -1
        if req.first_byte_at is not None and req.dispatched_at is not None:
            replica.first_s = _ewma(replica.first_s, req.first_byte_at - req.dispatched_at)
            regate(replica)
    return shut and not lower_shut(replica)


def lower_shut(replica: Replica) -> bool:
    """Whether ``replica`` takes no lower-tier stream now: its gate is full, or a Turbo stream
    awaits its first token there (a lower-tier prefill sent meanwhile would join Turbo's step)."""
    gate = replica.prefill_gate
    return replica.lower_prefills >= gate or (replica.turbo_prefills > 0 and gate < UNGATED)


def last_clear_left(replicas: list[Replica]) -> bool:
    """Whether of two or more healthy ``replicas`` just one has no lower-tier stream awaiting its
    first token: the one a Turbo request would find free of their prefills."""
    healthy = clear = 0
    for r in replicas:
        if r.health is Health.HEALTHY:
            healthy += 1
            clear += r.lower_prefills == 0
    return healthy >= 2 and clear == 1


def keeps_clear(replica: Replica) -> bool:
    """Whether ``replica``, the last clear one (``last_clear_left``), is kept for Turbo: where one
    lower-tier prefill costs Turbo more than half its time to a first token (the gate is one),
    a Turbo request that finds every replica prefilling the lower tiers waits one out.  Kept while
    the lower tiers queue or a surge is told, where one of them waiting a prefill longer costs
    little (at 0.2x it was their p95)."""
    return replica.lower_prefills == 0 and replica.prefill_gate == 1


def answer_paced(replica: Replica, req: FlowRequest, now: float) -> None:
    """``req``'s stream ended whole at ``now``: its time per output token is the replica's pace.
    The gate takes the lowest the averaged pace has been as the decode step: under an overload
    every other step carries a prefill, the pace of the streams slows with them, and read as the
    decode step it left a prefill's own share of a step looking small and the gate wide open —
    the more prefills, the wider (1,024-token prompts on 3 × L40S: eight lower-tier prefills let
    through a replica, Turbo 7–8× unloaded)."""
    if req.stream and req.first_byte_at is not None and req.completion_tokens > 1:
        replica.pace_s = _ewma(replica.pace_s, (now - req.first_byte_at) / (req.completion_tokens - 1))
        replica.step_s = replica.pace_s if replica.step_s <= 0.0 else min(replica.step_s, replica.pace_s)
        regate(replica)


def _ewma(value: float, sample: float) -> float:
    return sample if value <= 0.0 else value + TIMING_ALPHA * (sample - value)


def regate(replica: Replica) -> None:
    """Size ``replica``'s gate on its measures (a replica whose batch is not known has none)."""
    if replica.engine_seqs is not None and replica.scraped:
        replica.prefill_gate = prefill_gate(replica.engine_seqs, replica.first_s, replica.step_s)


def turbo_deficit(top_rate: float, service_s: float | None, top_in_flight: int, clump_credit: bool = False) -> int:
    """Slots the top tier is about to need beyond what it holds: its expected occupancy at
    ``top_rate`` (Little's law: rate × service time), less a standard deviation of its natural
    swing, less what it holds now.  Zero in a steady state; at a surge, the occupancy Turbo
    grows into over the next service time, which the lower tiers would otherwise fill at once
    and hold for a whole service time (the holdback's own headroom covers only the swing).

    ``clump_credit`` (while Standard does not queue): a clump of the top tier already in flight,
    more than a standard deviation above its expected occupancy, is swing the headroom was kept
    for; what it holds beyond that, up to another standard deviation, comes off the headroom (a
    negative deficit).  Else the lower tiers' ceiling keeps Turbo's whole swing free on top of a
    clump it already holds, and beside a Relax backlog Standard waits at the ceiling (issue 43:
    twelve Turbo arrivals in 0.86 s held Standard 68 ms, one slow 4-s window).  Not while
    Standard queues: a slot given then is taken at once and held a service time."""
    if service_s is None or top_rate <= 0.0:
        return 0
    expected = top_rate * service_s
    spread = math.sqrt(expected)
    if clump_credit and top_in_flight > expected + spread:
        return -min(int(top_in_flight - expected - spread), int(spread))
    return max(0, math.ceil(expected - spread) - top_in_flight)
