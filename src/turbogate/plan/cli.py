"""``turbogate plan`` (placeholder until the planner lands)."""

from __future__ import annotations

import typer

from turbogate.notlanded import not_landed

app = typer.Typer(help="Predict capacity, cost and ROI; recommend a Turbo mode.")


@app.callback(invoke_without_command=True)
def plan() -> None:
    """Capacity and ROI planning."""
    not_landed("plan", "the planner")
