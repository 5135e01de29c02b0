"""Every runtime dependency is one that src/ imports: what only tests, benchmarks or an optional
feature use belongs to an extra (pyproject.toml), not to every installation."""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_distributions() -> set[str]:
    modules: set[str] = set()
    for path in (ROOT / "src" / "turbogate").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules.add(node.module.split(".")[0])
    owners = packages_distributions()
    return {_normal(dist) for module in modules for dist in owners.get(module, [])}


def test_every_runtime_dependency_is_imported_by_src() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {_normal(re.split(r"[\[<>=!~; ]", spec, maxsplit=1)[0]) for spec in project["dependencies"]}
    unused = required - _imported_distributions()
    assert not unused, f"runtime dependencies src/ never imports: {sorted(unused)} (move them to an extra)"
