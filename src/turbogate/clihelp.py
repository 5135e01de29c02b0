"""Help that reads right, for every command (installed once, from clierrors.py, which every app imports).

Typer's rich help, as installed, shows a flag as if it took a value (``--find-knee <bool>``), puts a
required argument in braces on the usage line (``jobs lint [OPTIONS] {path}``), and reads every help
text as Rich markup, so ``pip install 'turbogate[ray]'`` lost its ``[ray]``.  Here: a flag shows no
type, an argument shows as ``PATH`` (``[PATH]`` when optional), and help text is plain text (the
project writes no markup in help).  tests/test_help.py renders every command's help and checks each.
"""

from __future__ import annotations

import inspect
from typing import Any

from rich.text import Text
from typer import core, rich_utils

_installed = False


def _flag_shows_no_type(self: core.TyperOption, ctx: Any) -> str | None:
    if self.is_flag and not self.count:
        return None
    return _option_type(self, ctx)


def _argument_usage_name(self: core.TyperArgument) -> str:
    name = self.metavar if self.metavar is not None else self.name.upper()
    if not self.required:
        name = f"[{name}]"
    return name + ("..." if self.nargs != 1 else "")


def _plain_text(*, text: str, style: str = "", markup_mode: Any = None) -> Any:
    """Help text as written: no Rich markup parsed (``[ray]`` stays), URLs and numbers still highlighted."""
    return rich_utils.highlighter(Text(inspect.cleandoc(text), style=style))


_option_type = core.TyperOption.display_type_rich


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    core.TyperOption.display_type_rich = _flag_shows_no_type  # type: ignore[method-assign]
    core.TyperArgument._usage_display_name = _argument_usage_name  # type: ignore[method-assign]
    rich_utils._make_rich_text = _plain_text
