"""One error style for every command: ``turbogate <command>: error: <what> (<what to do>)``.

Every Typer app of the project is built on :class:`OneLineErrors`, so an error ends the same way
whichever command raised it, and whether the command runs from the console script, from
``python -m turbogate`` or from a test's ``CliRunner``: one line on stderr, exit 2 for bad input
(a usage error, a bad config, an unknown name, a bad value), exit 1 for a run that failed, 130
for Ctrl-C.  A traceback is printed only with ``--debug`` (anywhere on the command line) or
``TURBOGATE_DEBUG=1``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import typer
from typer._click.core import Context  # Typer vendors its Click: its contexts and exceptions are these classes
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer._click.utils import _detect_program_name
from typer.core import TyperGroup

from turbogate import clihelp
from turbogate.errors import BadInput, CatalogError, ConfigError, InvalidRequest, TurbogateError

clihelp.install()  # every app is built on OneLineErrors, so its help is fixed here too

DEBUG_FLAG = "--debug"
DEBUG_ENV = "TURBOGATE_DEBUG"
BAD_INPUT_EXIT = 2
FAILED_EXIT = 1
INTERRUPTED_EXIT = 130

# What the user gave that was wrong (exit 2) rather than a run that went wrong (exit 1).
BAD_INPUT: tuple[type[BaseException], ...] = (BadInput, ConfigError, CatalogError, InvalidRequest, ValueError,
                                              FileNotFoundError, NotADirectoryError, IsADirectoryError)


def split_debug(args: Sequence[str]) -> tuple[list[str], bool]:
    """The arguments without ``--debug`` (accepted anywhere before ``--``), and whether it was there."""
    out: list[str] = []
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    for i, arg in enumerate(args):
        if arg == "--":
            out.extend(args[i:])
            break
        if arg == DEBUG_FLAG:
            debug = True
        else:
            out.append(arg)
    return out, debug


def one_line(text: str) -> str:
    """Several lines (a config with several problems, a wrapped message) joined into one."""
    parts = [p.strip() for p in text.replace("\r", "\n").split("\n")]
    return "; ".join(p for p in parts if p)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:2].istitle() and not text[:2].isupper() else text


def describe(exc: BaseException, command: str) -> tuple[str, str, int]:
    """(what, what to do, exit code) for an exception that ended ``command`` (e.g. ``turbogate bench``)."""
    help_hint = f"see {command} --help"
    if isinstance(exc, UsageError):
        return _lower_first(exc.format_message()), help_hint, BAD_INPUT_EXIT
    if isinstance(exc, ClickException):
        return exc.format_message(), help_hint, exc.exit_code or FAILED_EXIT
    hint = getattr(exc, "hint", None)
    if isinstance(exc, ConfigError):
        todo = "check the path" if "cannot read" in str(exc) else "fix the field it names in that file"
        return f"bad config: {exc}", hint or todo, BAD_INPUT_EXIT
    if isinstance(exc, CatalogError):
        return str(exc), hint or "turbogate plan gpus and turbogate plan models list the names", BAD_INPUT_EXIT
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        code = BAD_INPUT_EXIT if isinstance(exc, BAD_INPUT) else FAILED_EXIT
        return f"{exc.filename}: {exc.strerror}", hint or "check the path", code
    if isinstance(exc, BAD_INPUT):
        return str(exc) or type(exc).__name__, hint or help_hint, BAD_INPUT_EXIT
    if isinstance(exc, TurbogateError):
        return str(exc) or type(exc).__name__, hint or f"rerun with {DEBUG_FLAG} for details", FAILED_EXIT
    return (f"internal error: {type(exc).__name__}: {exc}",
            f"rerun with {DEBUG_FLAG} for the traceback, and please report it", FAILED_EXIT)


def error_line(command: str, what: str, todo: str) -> str:
    """``turbogate bench: error: <what> (<what to do>)``, always one line."""
    what = one_line(what).rstrip(".")
    return f"{command}: error: {what} ({one_line(todo)})"


class OneLineErrors(TyperGroup):
    """A Typer group whose errors end as one line (the module's docstring says how)."""

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            # The innermost group names the command that failed; the groups above keep its name.
            if not hasattr(exc, "_turbogate_command"):
                sub = ctx.invoked_subcommand
                path = f"{ctx.command_path} {sub}" if sub else ctx.command_path
                with contextlib.suppress(AttributeError):  # an exception without a __dict__ keeps the group's
                    exc._turbogate_command = path  # type: ignore[attr-defined]
            raise

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             **extra: Any) -> Any:
        given = sys.argv[1:] if args is None else list(args)
        argv, debug = split_debug(given)
        prog = prog_name or _detect_program_name()
        try:
            rv = super().main(argv, prog, complete_var, standalone_mode=False,
                             windows_expand_args=windows_expand_args, **extra)
        except typer.Abort:
            print(f"{prog}: interrupted", file=sys.stderr, flush=True)
            rv = INTERRUPTED_EXIT
        except Exception as exc:
            rv = report(exc, _command_of(exc, prog), debug)
        if not standalone_mode:
            return rv
        # super().main in non-standalone mode returns an Exit's code, or the command's value (None).
        sys.exit(rv if isinstance(rv, int) else 0)


def _command_of(exc: BaseException, prog: str) -> str:
    ctx = getattr(exc, "ctx", None)
    if isinstance(ctx, Context):
        return ctx.command_path
    return str(getattr(exc, "_turbogate_command", prog))


def report(exc: BaseException, command: str, debug: bool) -> int:
    """Print ``exc`` as one line on stderr (with its traceback first under ``--debug``); the exit code."""
    if isinstance(exc, NoArgsIsHelpError):  # a group called bare: its help is the answer, not an error
        print(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        return exc.exit_code
    what, todo, code = describe(exc, command)
    if debug and not isinstance(exc, ClickException):
        traceback.print_exception(exc)
    print(error_line(command, what, todo), file=sys.stderr, flush=True)
    return code
