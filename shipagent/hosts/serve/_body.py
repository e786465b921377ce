"""A request's JSON body: bounded in size before it is read, checked by :mod:`._input` after.

Apart from :mod:`._wire` because :mod:`._input` raises ``_wire``'s :class:`ApiError`: reading a
body needs both, and neither of them needs this.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from ._input import parse_json  # depth, number and surrogate checks
from ._wire import ApiError

__all__ = ["read_json"]


async def read_json(request: Request, max_bytes: int) -> Any:
    """The request's JSON body, refusing one over ``max_bytes`` before reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise ApiError(413, "body_too_large", f"request body is {declared} bytes; the limit is {max_bytes}")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > max_bytes:
            raise ApiError(413, "body_too_large", f"request body is over the limit of {max_bytes} bytes")
    if not body:
        raise ApiError(400, "invalid_json", "the request needs a JSON body")
    return parse_json(bytes(body))
