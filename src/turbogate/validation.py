"""pydantic's validation errors in the project's words: one line naming every bad field, the same
for every file the project reads (the gateway's config, the simulator's fleet), and the reading
and validating of such a file, written once for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from turbogate.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

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


def validate_document(model: type[M], data: Any, source: str) -> M:
    """``data``, a loaded YAML document, as ``model``; a ``ConfigError`` names ``source`` and each
    bad field (:func:`describe_validation_error`)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe_validation_error(exc)}") from None


def read_yaml(path: Path) -> Any:
    """The YAML document at ``path``; a ``ConfigError`` says why it could not be read."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
