"""pydantic's validation errors in the project's words: one line naming every bad field, the same
for every file the project reads (the gateway's config, the simulator's fleet)."""

from __future__ import annotations

from pydantic import ValidationError

#: pydantic's phrasing → ours (a bound reads as the comparison it is).
_PHRASES = (("Value error, ", ""),
            ("Input should be greater than or equal to", "must be >="), ("Input should be greater than", "must be >"),
            ("Input should be less than or equal to", "must be <="), ("Input should be less than", "must be <"))


def describe_validation_error(err: ValidationError) -> str:
    """``tiers.turbo.weight: must be > 0; pools.0.name: Field required`` — each error's dotted
    location (``(top level)`` for the whole document) and its message."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        for theirs, ours in _PHRASES:
            msg = msg.replace(theirs, ours)
        lines.append(f"{loc}: {msg}")
    return "; ".join(lines)
