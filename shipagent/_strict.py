"""Strict scalar types for ship.json: what ``config._Model`` checks before pydantic coerces.

pydantic's lax mode turns ``"maxRetries": true`` into 1, ``"enabled": 1`` into true and
``"enabled": "yes"`` into true. A user who wrote any of these made a mistake that must be named,
not guessed at. The rules, per kind of field:

- boolean: JSON ``true``/``false``, or exactly the string ``"true"``/``"false"`` (all a
  ``${VAR}`` can expand to); nothing else — no 0/1, no ``"yes"``/``"on"``.
- number (whole or not): a JSON number or a string holding one (``"4096"``, again for
  ``${VAR}``); never a boolean; always finite (``allow_inf_nan=False`` on the models). A whole
  number may be written ``2.0``, not ``2.5``.
- string: a JSON string; never a number or a boolean (``"name": 5`` is an error).
"""

from __future__ import annotations

import json
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic_core import PydanticCustomError

__all__ = ["strict_scalar"]

_SCALARS = (bool, int, float, str)


def _scalar_kinds(annotation: Any) -> set[type]:
    """The scalar types a field accepts (``int | None`` -> ``{int}``), through Optional, Annotated
    and unions; containers and models contribute nothing (their own fields are checked)."""
    if annotation in _SCALARS:
        return {annotation}
    origin = get_origin(annotation)
    if origin is Annotated:
        return _scalar_kinds(get_args(annotation)[0])
    if origin is Union or origin is UnionType:
        return {kind for arg in get_args(annotation) for kind in _scalar_kinds(arg)}
    return set()


def _shown(value: Any) -> str:
    """The value as the user wrote it in JSON (``true``, ``1``, ``"yes"``)."""
    if value is None or isinstance(value, bool | int | float | str):
        return json.dumps(value)
    return "a JSON " + (
        "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "value"
    )


def strict_scalar(annotation: Any, value: Any) -> Any:
    """``value`` for a field of type ``annotation``, or a ``PydanticCustomError`` naming the rule.

    Returns the value unchanged, except the strings ``"true"``/``"false"`` for a boolean field.
    """
    kinds = _scalar_kinds(annotation)
    if bool in kinds:
        if isinstance(value, bool) or value is None:
            return value
        if value in ("true", "false"):
            return value == "true"
        raise PydanticCustomError("strict_bool", "must be true or false, not {got}", {"got": _shown(value)})
    if kinds & {int, float} and isinstance(value, bool):
        what = "a number" if float in kinds else "a whole number"
        raise PydanticCustomError("strict_number", f"must be {what}, not {{got}}", {"got": _shown(value)})
    if kinds == {str} and isinstance(value, bool | int | float):
        raise PydanticCustomError(
            "strict_str", "must be a string (in quotes), not {got}", {"got": _shown(value)}
        )
    return value
