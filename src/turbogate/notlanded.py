"""What a subcommand says before its feature exists: plainly that, and a non-zero exit."""

from __future__ import annotations

import typer


def not_landed(command: str, what: str) -> None:
    typer.echo(
        f"turbogate {command}: not available yet — {what} has not landed in this version. "
        "Nothing was run.",
        err=True,
    )
    raise typer.Exit(code=2)
