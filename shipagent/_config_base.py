"""The base of every ship.json model: camelCase keys, unknown keys refused, strict scalars.

:mod:`shipagent.config` and the sections that live beside it (:mod:`shipagent._hosts_config`,
:mod:`shipagent._channels_config`) all derive from :class:`ConfigModel`, so a key of any section
follows the same rules and gets the same errors.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from ._strict import strict_scalar

__all__ = ["ConfigModel"]


class ConfigModel(BaseModel):
    """A ship.json object: camelCase keys (snake_case attributes), unknown keys refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=False, allow_inf_nan=False
    )

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        """Booleans never become numbers, numbers never become booleans or strings (see
        :mod:`shipagent._strict` for the rules and why)."""
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else strict_scalar(field.annotation, value)
