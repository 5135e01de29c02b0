"""``turbogate plan``: capacity, cost/ROI and the Turbo decision matrix (the I/O shell).

Every number comes from the pure modules beside this one; each subcommand's shell is its own
``*_cli.py`` module (their shared options and output helpers: ``cli_common.py``), and this file
gathers them into one command group.
"""

from __future__ import annotations

import typer

from turbogate.clierrors import OneLineErrors
from turbogate.plan.burst_cli import burst_cmd
from turbogate.plan.capacity_cli import capacity_cmd
from turbogate.plan.catalog_cli import gpus_cmd, models_cmd
from turbogate.plan.matrix_cli import matrix_cmd
from turbogate.plan.profile_cli import profile_cmd
from turbogate.plan.roi_cli import roi_cmd
from turbogate.plan.size_cli import size_cmd

app = typer.Typer(
    help="Size a fleet; predict capacity, cost and ROI; recommend a Turbo mode (Turbo on / capped / Standard only).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
)
app.command("size")(size_cmd)
app.command("profile")(profile_cmd)
app.command("burst")(burst_cmd)
app.command("capacity")(capacity_cmd)
app.command("roi")(roi_cmd)
app.command("matrix")(matrix_cmd)
app.command("gpus")(gpus_cmd)
app.command("models")(models_cmd)
