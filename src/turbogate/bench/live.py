"""Live progress: a Rich panel on a terminal, a plain line every few seconds otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import Counter
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from turbogate.bench.failures import reasons_line
from turbogate.bench.runner import Runner
from turbogate.results.fmt import fmt_ms, fmt_num


def _ms(v: float | None) -> str:
    return fmt_ms(v)


class LiveDisplay:
    def __init__(self, runner: Runner, total_s: float | None, enabled: bool = True,
                 stream: TextIO | None = None) -> None:
        self.runner = runner
        self.total_s = total_s
        self.stream = stream or sys.stderr
        self.rich = enabled and self.stream.isatty()
        self.enabled = enabled
        self._task: asyncio.Task[None] | None = None

    def _row(self) -> dict[str, str]:
        r, st = self.runner, self.runner.state
        now = r.now()
        total = f"/{self.total_s:.0f}" if self.total_s else ""
        return {
            "elapsed": f"{max(0.0, now):.0f}{total} s", "step": str(st.step),
            "offered": f"{fmt_num(st.offered_rps)} req/s",
            "achieved": f"{fmt_num(st.achieved_rps(now))} req/s", "in flight": str(st.in_flight),
            "sent": str(st.dispatched), "ok": str(st.ok), "errors": str(st.errors),
            "unfinished": str(st.unfinished), "p95 e2e": _ms(r.p95_e2e()), "p99 lag": _ms(r.p99_lag()),
        } | ({"top errors": reasons_line(Counter(dict(st.reasons.most_common(2))))} if st.reasons else {})

    def _table(self) -> Table:
        t = Table(title="turbogate bench", show_header=True)
        row = self._row()
        for k in row:
            t.add_column(k)
        t.add_row(*row.values())
        return t

    async def _loop(self) -> None:
        if self.rich:
            with Live(get_renderable=self._table, console=Console(file=self.stream), refresh_per_second=2,
                      transient=False):
                while True:
                    await asyncio.sleep(0.5)
        else:
            while True:
                await asyncio.sleep(5.0)
                print("  ".join(f"{k}={v}" for k, v in self._row().items()), file=self.stream, flush=True)

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            if not self.rich:  # the last counts, after the drain: the same as the final table's
                print("  ".join(f"{k}={v}" for k, v in self._row().items()), file=self.stream, flush=True)
