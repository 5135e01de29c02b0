"""``turbogate jobs``: L4 job graphs (DAGs of generation steps)."""

from __future__ import annotations

from pathlib import Path

import typer

from turbogate.notlanded import not_landed

app = typer.Typer(help="Job graphs (DAGs of generation steps): validate and inspect.", no_args_is_help=True)


@app.command("lint")
def lint(path: Path = typer.Argument(..., help="A job graph file (YAML or JSON).")) -> None:
    """Validate a job graph: acyclic, depth and fan-out limits."""
    not_landed("jobs lint", "L4 job graphs")
