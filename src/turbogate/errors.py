"""One small error hierarchy.  HTTP shells map these onto OpenAI-style error bodies."""

from __future__ import annotations


class TurbogateError(Exception):
    """Base of every error turbogate raises on purpose."""


class ConfigError(TurbogateError):
    """A configuration value is missing or invalid; the message names the field."""


class CatalogError(TurbogateError):
    """An unknown GPU or model name, or a model config that cannot be read."""


class ValidationError(TurbogateError):
    """A request body is invalid; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
