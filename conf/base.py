"""The base of every config model: pydantic v2, frozen, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A misspelt key fails at load with its dotted path; a loaded config never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
