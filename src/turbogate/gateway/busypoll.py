"""Polling instead of sleeping when the next event is due soon (``listen.idle_poll_max_us``, on by
default, and the fixed ``listen.busy_poll_us``).

At light load the gateway's event loop sleeps between a request's events: the request arrives,
goes upstream, the loop sleeps in epoll until the engine answers, writes the answer, and sleeps
until the client's next request.  Each wake-up from such a sleep costs tens of microseconds on a
virtual machine (the idle vCPU halts and the host must wake it), and the caches go cold
meanwhile, so one connection's request costs about twice the CPU and latency it costs on a busy
core (docs/gateway.md, fifth, eighth and ninth passes).  While the loop polls — each turn asks
epoll with a zero timeout — an event is read the moment it lands.

**The adaptive window** (``PollWindow``) is the rule of Linux's ``cpuidle-haltpoll`` governor,
which this machine's kernel has switched off (``guest_halt_poll_ns=0``), applied to the event
loop instead of the vCPU.  After each idle period it learns from how long the loop was idle:

- idle no longer than the window: the poll caught the event; the window stays;
- idle longer than the window but no longer than the cap: a longer poll would have caught it,
  so the window grows (doubles, from a quarter of the cap, up to the cap);
- idle longer than the cap: no poll worth having would have caught it, so the window halves
  (and is 0 below an eighth of the cap).

So the window opens only where events come back within the cap (a fast engine, a client sending its
next request at once) and closes where they do not: an LLM engine's answer or stream chunk comes
after milliseconds, every idle period is past the cap, and the window stays shut, at a cost of three
loop turns for one event in eight (``SAMPLE_SHUT_EVERY``: how it notices when to open). Under heavy
load the loop never idles and nothing changes. The time spent polling is counted (``polled_s``,
exported as ``turbogate_idle_poll_seconds_total``) and the window is exported as
``turbogate_idle_poll_window_seconds``.

**The fixed window** (``listen.busy_poll_us``, off by default) polls that long after every idle
start, whatever came before: the same trade without the learning.
"""

from __future__ import annotations

import asyncio
import time

#: Two loop turns closer than this had nothing run between them: the loop is idle.  A turn of an
#: idle uvloop (a zero-timeout epoll and this callback) takes 1–5 µs here.
QUIET_TURN_S = 20e-6
#: While the window is shut, one event in this many is followed to its idle start (three loop
#: turns), so the window can learn to open again; the others cost nothing.
SAMPLE_SHUT_EVERY = 8


class PollWindow:
    """How long to poll before sleeping: the ``cpuidle-haltpoll`` governor's rule (the module
    docstring).  Pure: ``idled`` takes a duration, nothing reads a clock."""

    __slots__ = ("cap_s", "grow_start_s", "window_s")

    def __init__(self, cap_s: float) -> None:
        self.cap_s = cap_s
        self.grow_start_s = cap_s / 4
        self.window_s = 0.0

    def idled(self, idle_s: float) -> None:
        """Learn from one idle period that an event ended after ``idle_s``."""
        window = self.window_s
        if idle_s <= window:
            return
        if idle_s <= self.cap_s:
            self.window_s = min(self.cap_s, max(self.grow_start_s, window * 2))
        else:
            window /= 2
            self.window_s = window if window >= self.cap_s / 8 else 0.0


class FixedWindow(PollWindow):
    """``listen.busy_poll_us``: always the same window."""

    __slots__ = ()

    def __init__(self, window_s: float) -> None:
        super().__init__(window_s)
        self.window_s = window_s

    def idled(self, idle_s: float) -> None:
        return


class IdlePoll:
    """Keeps one event loop polling for ``window.window_s`` after it goes idle.

    ``kick()`` is called where an event arrives (a client's or an engine's bytes): it tells the
    window how long the loop was idle, and starts a chain of loop turns if none runs.  Each turn
    finds whether anything ran since the last one; once the loop is idle for the window, the chain
    ends and the loop may sleep."""

    __slots__ = ("_fresh", "_idle_since", "_last_turn", "_loop", "_skipped", "_turning", "polled_s", "window")

    def __init__(self, loop: asyncio.AbstractEventLoop, window: PollWindow) -> None:
        self._loop = loop
        self.window = window
        self._turning = False
        self._idle_since: float | None = None  # when the loop last went idle (None: busy, or unknown)
        self._last_turn = 0.0
        self._fresh = False  # an event came since the last turn: its work may be queued behind that turn
        self._skipped = 0  # events not followed since the window shut
        self.polled_s = 0.0  # time the loop spent polling where it could have slept

    def kick(self, now: float) -> None:
        """An event arrived at ``now`` (``time.perf_counter()``, read once by the caller, which reads it anyway)."""
        idle_since = self._idle_since
        if idle_since is not None:
            self._idle_since = None
            self.window.idled(now - idle_since)
            if self._turning:
                self.polled_s += now - idle_since
        self._last_turn = now  # the work this event starts is not idleness
        self._fresh = True
        if not self._turning:
            if self.window.window_s <= 0 and self._skipped < SAMPLE_SHUT_EVERY - 1:
                self._skipped += 1  # shut: this event goes unfollowed (its idle period unmeasured)
                return
            self._skipped = 0
            self._turning = True
            self._loop.call_soon(self._turn)

    def _turn(self) -> None:
        now = time.perf_counter()
        last, self._last_turn = self._last_turn, now
        idle_since = self._idle_since
        if idle_since is None:
            # The first turn after an event may run before the work the event queued (a request's
            # task): wait for the next, behind it.  Otherwise: did work run since the last turn?
            if self._fresh or now - last >= QUIET_TURN_S:
                self._fresh = False
                self._again()
                return
            idle_since = self._idle_since = last
        # Idle from then on; a slow turn later (a timer's work, a preempted vCPU) does not undo it.
        if now - idle_since >= self.window.window_s:  # idle for the whole window: let the loop sleep
            self._turning = False
            self.polled_s += now - idle_since
            return
        self._again()

    def _again(self) -> None:
        if self._loop.is_closed():
            self._turning = False
        else:
            self._loop.call_soon(self._turn)


def idle_poll(loop: asyncio.AbstractEventLoop, busy_poll_us: int, idle_poll_max_us: int) -> IdlePoll | None:
    """The loop's poller for the ``listen`` settings: the fixed window where one is set, else the
    adaptive one, or None where both are 0."""
    if busy_poll_us > 0:
        return IdlePoll(loop, FixedWindow(busy_poll_us / 1e6))
    if idle_poll_max_us > 0:
        return IdlePoll(loop, PollWindow(idle_poll_max_us / 1e6))
    return None


def describe(poll: IdlePoll | None) -> str:
    """The poller in words, for the start-up log."""
    if poll is None:
        return "no idle poll"
    if isinstance(poll.window, FixedWindow):
        return f"fixed poll window {poll.window.window_s * 1e6:g} µs"
    return f"adaptive poll window up to {poll.window.cap_s * 1e6:g} µs"
