"""Progress of ``turbogate sim``: a Rich bar on a terminal, plain lines on stderr otherwise.

A sweep of a large fleet runs for minutes; redirected to a file or a CI log a Rich bar prints
nothing, so without a terminal the same progress comes as a line every :data:`LINE_EVERY_S`
seconds (and one at the end), each naming what is done, the share and the time so far.  A
heartbeat thread writes the line even while nothing finishes (a sweep's points run in other
processes and report only when done).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

#: Seconds between two progress lines when the output is not a terminal.
LINE_EVERY_S = 10.0


class Bar:
    """``with Bar(on, unit, total) as advance: advance(n)``: a bar, progress lines, or nothing."""

    def __init__(self, enabled: bool, unit: str, total: float, *, terminal: bool | None = None,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 every_s: float = LINE_EVERY_S, heartbeat: bool = True) -> None:
        self._unit, self._total, self._done, self._every = unit, total, 0.0, every_s
        self._stream = stream or sys.stderr
        tty = self._stream.isatty() if terminal is None else terminal
        self._lines = enabled and not tty
        self._clock = clock
        self._start = self._last = clock()
        self._p = Progress(TextColumn("[bold]sim[/bold]"), BarColumn(), TextColumn(f"{{task.completed:.0f}}/"
                           f"{{task.total:.0f}} {unit}"), TimeRemainingColumn(),
                           disable=not enabled or self._lines, transient=True)
        self._task = self._p.add_task("sim", total=total)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="sim-progress", daemon=True) \
            if self._lines and heartbeat else None

    def __enter__(self) -> Callable[[float], None]:
        self._p.start()
        if self._beat is not None:
            self._beat.start()
        return self.advance

    def advance(self, n: float) -> None:
        self._p.advance(self._task, n)
        with self._lock:
            self._done += n
            self._maybe_line()

    def _maybe_line(self) -> None:
        now = self._clock()
        if self._lines and now - self._last >= self._every:
            self._last = now
            self._line(now)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._every / 2):
            with self._lock:
                self._maybe_line()

    def _line(self, now: float) -> None:
        share = self._done / self._total if self._total > 0 else 1.0
        print(f"sim: {self._done:.0f}/{self._total:.0f} {self._unit} ({share:.0%}), {now - self._start:.0f} s elapsed",
              file=self._stream, flush=True)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        self._p.stop()
        if self._lines and exc[0] is None:
            self._line(self._clock())


def note(enabled: bool, text: str, stream: TextIO | None = None) -> None:
    """One line about a long step (writing the run folder) when progress goes to a log, not a terminal."""
    out = stream or sys.stderr
    if enabled and not out.isatty():
        print(f"sim: {text}", file=out, flush=True)
