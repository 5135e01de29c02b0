"""The one ``turbogate`` command line.  Each subcommand lives beside the code it drives."""

from __future__ import annotations

import os
import sys

import typer
import typer.rich_utils

from turbogate import __version__, build
from turbogate.bench.cli import app as bench_app
from turbogate.clierrors import DEBUG_FLAG, OneLineErrors
from turbogate.demo import demo
from turbogate.emulator.cli import emulate
from turbogate.gateway.cli import serve
from turbogate.jobs_cli import app as jobs_app
from turbogate.plan.cli import app as plan_app
from turbogate.sim.cli import sim
from turbogate.trace.cli import app as trace_app

app = typer.Typer(
    name="turbogate",
    help=(
        "Tiered-latency gateway and capacity lab for self-hosted LLM inference.\n\n"
        "Serve a Turbo tier beside Standard and Relax (serve), and know when Turbo stops "
        "paying off (bench, sim, plan). `turbogate emulate` runs a GPU-free engine emulator "
        "so the whole stack works on a laptop; `turbogate demo` shows it end to end."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
)
app.command("serve", help="Run the OpenAI-compatible tiered gateway.")(serve)
app.add_typer(bench_app, name="bench")
app.add_typer(plan_app, name="plan")
app.command("sim", help="Simulate a fleet in virtual time with the gateway's own scheduler.")(sim)
app.command("emulate", help="Run an OpenAI-compatible engine emulator with vLLM metric names.")(emulate)
app.command("demo", help="Where does Turbo pay? sim places five load steps around the knee of a small emulated "
            "fleet, the real gateway and emulators measure them, and the answer is a band of load with evidence at "
            "both ends (about a minute).")(demo)
app.add_typer(jobs_app, name="jobs")
app.add_typer(trace_app, name="trace")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"turbogate {__version__} ({build()})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    debug: bool = typer.Option(False, DEBUG_FLAG, help="On an error, print the traceback before the one-line message "
                               "(accepted anywhere on the command line; or TURBOGATE_DEBUG=1)."),
) -> None:
    """turbogate command line."""


# Help printed to a pipe or a file gets this width, not Rich's 80-column fallback, which cut defaults
# such as "http://127.0.0.1:…" off.  A terminal keeps its own width; COLUMNS or TERMINAL_WIDTH win.
PIPED_HELP_WIDTH = 200


def set_help_width() -> None:
    if typer.rich_utils.MAX_WIDTH is None and "COLUMNS" not in os.environ and not sys.stdout.isatty():
        typer.rich_utils.MAX_WIDTH = PIPED_HELP_WIDTH


def main() -> None:
    set_help_width()
    app(prog_name="turbogate")  # also under ``python -m turbogate``: errors and usage name the command


if __name__ == "__main__":
    main()
