"""The gateway config's shared pieces: the strict base model and the value types several sections use."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

TierName = Literal["turbo", "standard", "relax"]
RegionName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,32}$", description="a region name")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="sha256 hex digest (lower case)")]


class ConfigModel(BaseModel):
    """Every config section: unknown keys are errors (a misspelt key must not pass silently) and
    values are frozen, so one default instance can be shared."""

    model_config = ConfigDict(extra="forbid", frozen=True)
