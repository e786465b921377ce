"""Request bodies checked at the door: JSON that parses, stays shallow, and holds only storable text.

Three inputs used to get past ``json.loads`` into a 500 or a lost turn: nesting deep enough to
exhaust the parser's recursion, an integer longer than Python converts (4,300 digits), and a lone
UTF-16 surrogate (``"\\ud800"``), which JSON allows but UTF-8 cannot store: the turn ran and then
could not be saved. Each is a 400 here, naming the JSON path.

Lone surrogates are **refused, not replaced**: replacing would silently change what the user
wrote (and what the model answers to), and a client producing them has a bug worth hearing about
(JavaScript cutting a string between the two halves of an emoji).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._wire import ApiError

__all__ = ["MAX_DEPTH", "MAX_NUMBER_DIGITS", "parse_json"]

MAX_DEPTH = 64
"""Arrays and objects nested deeper than this are refused (the API's own bodies nest 4 deep)."""
MAX_NUMBER_DIGITS = 100
"""Longer number literals are refused: no field of the API needs them."""
_SURROGATE = re.compile("[\ud800-\udfff]")


class _BadNumber(ValueError):
    pass


def _number(literal: str) -> Any:
    if len(literal) > MAX_NUMBER_DIGITS:
        raise _BadNumber(f"a number of {len(literal)} characters (the limit is {MAX_NUMBER_DIGITS})")
    return int(literal) if literal.lstrip("-").isdigit() else float(literal)


def _constant(name: str) -> Any:
    raise _BadNumber(f"{name} is not JSON")


def _depth_and_surrogates(value: Any) -> None:
    """Walk ``value`` without recursion; 400 at the first too-deep container or lone surrogate."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise _surrogate_error(path or "the body")
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                raise _too_deep()
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise _surrogate_error(f"a key in {path or 'the body'}")
                where = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else key)
                stack.append((child, where, depth + 1))


def _surrogate_error(path: str) -> ApiError:
    return ApiError(
        400,
        "invalid_text",
        f"'{path}' holds an unpaired UTF-16 surrogate (like \\ud800), which is not text; "
        "send the whole character",
        field=path,
    )


def _too_deep() -> ApiError:
    return ApiError(400, "invalid_json", f"the request body nests arrays/objects deeper than {MAX_DEPTH}")


def parse_json(body: bytes) -> Any:
    """``body`` as JSON, or an :class:`ApiError` (400) that says what is wrong and where."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, "invalid_json", f"the request body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_int=_number, parse_float=_number, parse_constant=_constant)
    except RecursionError:
        raise _too_deep() from None
    except _BadNumber as exc:
        raise ApiError(400, "invalid_json", f"the request body holds {exc}") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, "invalid_json", f"the request body is not valid JSON: {exc}") from None
    _depth_and_surrogates(value)
    return value
