"""Every flag a command names to its user exists on that command, and every command's help renders right.

Three sources of hints, each checked against the Click parameters of the command that prints it:
- every option's and argument's help text, per command (what ``--help`` shows);
- the prose string literals of each command's own modules (errors, warnings, hints, notes); a literal
  that names another command (``turbogate bench … --api-key``) is checked against that command;
- the one-line errors of every bad-input case of tests/test_cli_errors.py, as the commands print them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer._click.core import Command
from typer.core import TyperGroup as Group
from typer.testing import CliRunner

from tests.test_cli_errors import CASES
from turbogate.cli import app

SRC = Path(__file__).resolve().parents[1] / "src" / "turbogate"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# "turbogate bench compare", "turbo-bench", a command's name just before a flag ("`sim --trace`"), or a
# command in backticks ("`plan capacity`, `sim` and `emulate` take --gpu-profile": the last one named owns it).
NAMED_COMMAND = re.compile(r"\bturbogate ([a-z]+(?: [a-z]+)?)\b|\b(turbo-bench)\b"
                           r"|(?<![\w-])(bench|sim|plan|serve|emulate|demo|jobs|trace)(?= --)"
                           r"|`((?:bench|sim|plan|serve|emulate|demo|jobs|trace)(?: [a-z]+)?)`")

# The modules whose messages only one command prints.
OWN_MODULES: dict[str, list[str]] = {
    "bench": ["bench/cli.py", "bench/run.py", "bench/failures.py", "bench/collectors.py", "bench/workers.py",
              "bench/findknee.py", "bench/live.py", "bench/runner.py"],
    "sim": ["sim/cli.py", "sim/sweep.py", "sim/run.py", "sim/progress.py"],
    "plan": ["plan/cli.py", "plan/cli_common.py", "plan/capacity_cli.py", "plan/roi_cli.py", "plan/matrix_cli.py",
             "plan/catalog_cli.py"],
    "emulate": ["emulator/cli.py", "emulator/calibrate.py"],
    "serve": ["gateway/cli.py"],
    "jobs lint": ["jobs_cli.py"],
    "demo": ["demo.py"],
}

ROOT = typer.main.get_command(app)
GLOBAL = {"--help", "--debug", "--version"}


def _walk(cmd: Command, path: str) -> Iterator[tuple[str, Command]]:
    yield path, cmd
    if isinstance(cmd, Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, f"{path} {name}".strip())


COMMANDS = dict(_walk(ROOT, ""))


def flags_of(command: str) -> set[str]:
    """The flags ``command`` accepts; a group's flags include its subcommands' (``plan`` hints span them)."""
    out = set(GLOBAL)
    for path, cmd in COMMANDS.items():
        if path == command or path.startswith(command + " "):
            for p in cmd.params:
                out.update(o for o in (*p.opts, *p.secondary_opts) if o.startswith("--"))
    return out


def _resolve(named: str) -> str:
    """``bench compare`` or ``plan roi`` when that is a command, else its first word."""
    return named if named in COMMANDS else named.split()[0]


def unknown_flags(text: str, command: str) -> list[str]:
    """The flags ``text`` names that their command lacks.  A command named in the text (``turbogate X``, a
    backticked name) owns the flags that follow it up to the next punctuation; after that, ``command`` again."""
    missing: list[str] = []
    owner, last_end = command, 0
    for m in sorted([*FLAG.finditer(text), *NAMED_COMMAND.finditer(text)], key=lambda m: m.start()):
        if m.re is NAMED_COMMAND:
            named = m.group(1) or m.group(3) or m.group(4) or "bench"
            if _resolve(named) in COMMANDS:
                owner = _resolve(named)
            last_end = m.end()
            continue
        gap = text[last_end:m.start()]
        if owner != command and re.search(r"[,.;:()]", gap):
            owner = command  # prose since the named command's line: back to the command that prints it
        if m.group(0) not in flags_of(owner):
            missing.append(f"{m.group(0)} (for {owner!r})")
        last_end = m.end()
    return missing


def _literals(path: Path) -> Iterator[tuple[int, str]]:
    """Prose string literals of a module: f-strings joined, docstrings and bare argv flags left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if id(node) in docstrings or id(node) in inner:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        else:
            continue
        if " " in text.strip():  # a sentence, not an argv element such as "--gpu"
            yield node.lineno, text


@pytest.mark.parametrize("command", sorted(OWN_MODULES))
def test_every_flag_a_commands_messages_name_exists(command: str) -> None:
    found = [f"{rel}:{line}: {flag}" for rel in OWN_MODULES[command]
             for line, text in _literals(SRC / rel) for flag in unknown_flags(text, command)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("command", sorted(c for c in COMMANDS if c))
def test_every_flag_a_commands_help_names_exists(command: str) -> None:
    cmd = COMMANDS[command]
    texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
    found = [flag for t in texts for flag in unknown_flags(t, command)]
    assert not found, found


def test_every_flag_an_error_line_names_exists(tmp_path_factory: pytest.TempPathFactory) -> None:
    found = []
    for i, (command, make_args, _) in enumerate(CASES):
        args = make_args(tmp_path_factory.mktemp(f"case{i}"))
        line = CliRunner().invoke(app, [*command.split(), *args]).stderr.strip()
        if "no such option" in line:
            continue  # the user's own mistyped flag, quoted back
        found += [f"{command} {args}: {flag}" for flag in unknown_flags(line, command)]
    assert not found, "\n".join(found)


def test_the_checker_catches_a_flag_the_command_lacks() -> None:
    assert unknown_flags("pass --api-key", "bench") == []
    assert unknown_flags("pass --api-key", "plan capacity") == ["--api-key (for 'plan capacity')"]
    assert unknown_flags("run turbogate bench --api-key K", "demo") == []
    assert unknown_flags("run turbogate bench --api-key K --find-knee, then see --out", "demo") == []
    assert unknown_flags("`sim` and `emulate` take --gpu-profile, unless --tiny", "plan profile") == []
    assert unknown_flags("`emulate` takes --gpu-profile, unless --bogus", "plan profile") == [
        "--bogus (for 'plan profile')"]


# ---- help that renders right ------------------------------------------------------------------------------------

def _help(command: str) -> str:
    result = CliRunner().invoke(app, [*command.split(), "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_shows_flags_without_a_type_and_arguments_without_braces(command: str) -> None:
    text = _help(command)
    assert "<bool>" not in text
    usage = next(x for x in text.splitlines() if "Usage:" in x)
    assert "{" not in usage, usage
    for p in COMMANDS[command].params:
        help_text = getattr(p, "help", None)
        if help_text and "[" in help_text:  # markup-looking text survives as written
            words = re.findall(r"\[[a-z]+\]", help_text)
            flat = " ".join(text.split())
            assert all(w in flat for w in words), (p.name, words)


def test_bench_help_does_not_claim_a_subcommand_is_required() -> None:
    usage = next(x for x in _help("bench").splitlines() if "Usage:" in x)
    assert "COMMAND [ARGS]" not in usage and "[compare RUN_A RUN_B]" in usage
    assert "pip install 'turbogate[ray]'" in " ".join(_help("bench").split()).replace("│", "")
