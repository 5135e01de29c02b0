"""``turbogate bench`` / ``turbo-bench`` (placeholder until the bench lands)."""

from __future__ import annotations

import typer

from turbogate.notlanded import not_landed

app = typer.Typer(help="Drive real load with QPS ramps and find the knee.")


@app.callback(invoke_without_command=True)
def bench() -> None:
    """Run a benchmark."""
    not_landed("bench", "the load generator")


def turbo_bench_main() -> None:
    app()
