"""The JSON the server speaks: results and events in camelCase, errors as ``{"error": {...}}``.

Every refusal is a 4xx/5xx with a body a program can branch on (``error.type``) and a person can
read (``error.message``), never an HTML page or a bare status.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic.alias_generators import to_camel
from starlette.responses import JSONResponse as _StarletteJSON

from ...events import Done, RunEvent
from ...results import AgentResult

__all__ = [
    "ApiError",
    "JSONResponse",
    "error_response",
    "event_json",
    "result_json",
    "sse",
]


class JSONResponse(_StarletteJSON):
    """JSON ending in a newline, so ``curl`` output stays one document per line."""

    def render(self, content: Any) -> bytes:
        return super().render(content) + b"\n"


class ApiError(Exception):
    """A request the server refuses: HTTP ``status``, a machine ``kind`` and a message."""

    def __init__(self, status: int, kind: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.extra = extra


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"type": error.kind, "message": error.message, **error.extra}}
    return JSONResponse(body, status_code=error.status, headers=headers)


def result_json(result: AgentResult) -> dict[str, Any]:
    """An :class:`AgentResult` as camelCase JSON (what ``POST .../messages`` returns)."""
    return result.to_json()


def event_json(event: RunEvent) -> dict[str, Any]:
    """An event's fields in camelCase (``type`` is the SSE event name, not repeated here)."""
    if isinstance(event, Done):
        return {"result": result_json(event.result)}
    return {to_camel(f.name): getattr(event, f.name) for f in dataclasses.fields(event) if f.name != "type"}


def sse(event: str | None, data: Any) -> bytes:
    """One Server-Sent Event; ``data`` is JSON-encoded unless it is already a string."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()
