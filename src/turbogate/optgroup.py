"""Options several commands share, defined once (the CLI shell).

A group is a frozen dataclass whose fields hold the options' values, with each field's type and
``typer.Option`` (whose default is the field's).  A command takes the whole group as one parameter
whose default is the group's ``marker``; :func:`expand` shows typer the group's options in that parameter's place (so
``--help`` lists them where it stands) and hands the command one instance of the dataclass.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

G = TypeVar("G")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class OptionGroup(Generic[G]):
    """``cls``, a dataclass, and each of its fields' (type, typer option)."""

    cls: type[G]
    options: Mapping[str, tuple[Any, Any]]

    def __post_init__(self) -> None:
        if list(self.options) != [f.name for f in fields(self.cls)]:  # type: ignore[arg-type]
            raise TypeError(f"{self.cls.__name__}: one option per field, in the fields' order")

    @property
    def marker(self) -> G:
        """The group with every option's default: the default of a command's parameter that stands for it."""
        return self.cls(**{name: option.default for name, (_, option) in self.options.items()})


def expand(**groups: OptionGroup[Any]) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A decorator: each parameter of the command named in ``groups`` becomes that group's options."""

    def decorate(command: Callable[..., R]) -> Callable[..., R]:
        hints = inspect.get_annotations(command, eval_str=True)
        signature = inspect.signature(command, eval_str=True)
        missing = set(groups) - set(signature.parameters)
        if missing:
            raise TypeError(f"{command.__name__} has no parameter {', '.join(sorted(missing))}")
        params: list[inspect.Parameter] = []
        for p in signature.parameters.values():
            if p.name in groups:
                params.extend(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                                annotation=kind)
                              for name, (kind, option) in groups[p.name].options.items())
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(command)
        def expanded(*args: Any, **kwargs: Any) -> R:
            for param, group in groups.items():
                kwargs[param] = group.cls(**{name: kwargs.pop(name) for name in group.options if name in kwargs})
            return command(*args, **kwargs)

        expanded.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            params, return_annotation=hints.get("return"))
        expanded.__annotations__ = {p.name: p.annotation for p in params} | {"return": hints.get("return")}
        return expanded

    return decorate
