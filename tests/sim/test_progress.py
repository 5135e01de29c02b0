"""Progress lines of ``turbogate sim`` when its output is not a terminal."""

from __future__ import annotations

import io
import time

from turbogate.sim.progress import LINE_EVERY_S, Bar, note


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_a_line_every_interval_and_one_at_the_end() -> None:
    out, clock = io.StringIO(), _Clock()
    with Bar(True, "runs", 6, terminal=False, stream=out, clock=clock, heartbeat=False) as advance:
        advance(1)  # at once: no line yet
        clock.now = LINE_EVERY_S
        advance(2)
        clock.now = LINE_EVERY_S + 1  # too soon for another
        advance(1)
        clock.now = 2 * LINE_EVERY_S + 1
        advance(2)
    lines = out.getvalue().splitlines()
    assert lines == [
        f"sim: 3/6 runs (50%), {LINE_EVERY_S:.0f} s elapsed",
        f"sim: 6/6 runs (100%), {2 * LINE_EVERY_S + 1:.0f} s elapsed",
        f"sim: 6/6 runs (100%), {2 * LINE_EVERY_S + 1:.0f} s elapsed",
    ]


def test_no_lines_on_a_terminal_or_when_disabled() -> None:
    for enabled, terminal in ((True, True), (False, False)):
        out, clock = io.StringIO(), _Clock()
        with Bar(enabled, "virtual s", 10, terminal=terminal, stream=out, clock=clock) as advance:
            clock.now = 100.0
            advance(10)
        assert out.getvalue() == ""
    out = io.StringIO()
    note(True, "writing runs/x", out)  # StringIO is no terminal
    assert out.getvalue() == "sim: writing runs/x\n"


def test_a_line_comes_while_nothing_finishes() -> None:
    out = io.StringIO()
    with Bar(True, "runs", 4, terminal=False, stream=out, every_s=0.05):
        deadline = time.monotonic() + 30.0  # the heartbeat thread needs a turn on a busy machine
        while "0/4 runs (0%)" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "sim: 0/4 runs (0%)" in out.getvalue()
