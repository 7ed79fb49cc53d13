"""The base of every validated configuration: unknown fields refused, one-line errors."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from multispin.errors import config_error_from_validation


class StrictConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @classmethod
    def make(cls, **kwargs: Any):
        """Build and validate, raising a one-line ConfigError that names the bad field."""
        try:
            return cls(**kwargs)
        except ValidationError as exc:
            raise config_error_from_validation(exc) from None
