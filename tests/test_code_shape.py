"""The code's shape rules (issue 41), read from the source: they fail when a change breaks them."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "turbogate"
COMPOSITION_ROOT = SRC / "gateway" / "app.py"
MAX_LINES = 450


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_source_file_is_over_the_line_limit() -> None:
    long = {str(p.relative_to(SRC)): n for p in _sources()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_only_the_composition_root_knows_the_gateway_whole() -> None:
    imports = re.compile(r"\bGatewayApp\b")
    private = re.compile(r"\bapp\._[a-z]")
    offenders = {}
    for path in _sources():
        if path == COMPOSITION_ROOT:
            continue
        text = path.read_text(encoding="utf-8")
        found = [m.group(0) for m in (*imports.finditer(text), *private.finditer(text))]
        if found:
            offenders[str(path.relative_to(SRC))] = sorted(set(found))
    assert not offenders, f"modules reaching for the whole gateway: {offenders}"


def test_the_rules_see_a_violation() -> None:
    """The patterns above do match what they forbid (a test that could not fail proves nothing)."""
    assert re.search(r"\bGatewayApp\b", "from turbogate.gateway.app import GatewayApp")
    assert re.search(r"\bapp\._[a-z]", "await app._serve(receive, send)")
