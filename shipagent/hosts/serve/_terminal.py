"""Every event stream ends with an answer: ``done`` or ``error``, never a silent cut.

Once a ``200 text/event-stream`` has gone out, a failure can no longer be a status code. If the
turn raises mid-stream (a model that breaks, a store that cannot write), the client would see the
body simply stop and could not tell a crash from a slow model. :func:`terminated` wraps a stream's
body: an exception becomes a final ``error`` event (native dialect) or an ``error`` object followed
by ``[DONE]`` (OpenAI dialect), and a body that ends without its last event gets one. A client that
leaves (cancellation) is not an error: nothing more is written to it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Literal

from ._wire import sse

__all__ = ["terminated"]

log = logging.getLogger("shipagent.hosts.serve")
Dialect = Literal["native", "openai"]
_NATIVE_LAST = (b"event: done\n", b"event: error\n")
_OPENAI_LAST = b"data: [DONE]\n"


def _error(kind: str, message: str, request_id: str | None) -> dict[str, object]:
    error: dict[str, object] = {"type": kind, "message": message}
    if request_id is not None:
        error["requestId"] = request_id
    return {"error": error}


async def terminated(
    body: AsyncIterator[bytes], dialect: Dialect, request_id: str | None = None
) -> AsyncIterator[bytes]:
    """``body``, ending with ``done``/``error`` (native) or ``[DONE]`` (OpenAI) whatever happens."""
    finished = False
    try:
        async for piece in body:
            if dialect == "native":
                finished = piece.startswith(_NATIVE_LAST)
            else:
                finished = piece.startswith(_OPENAI_LAST)
            yield piece
    except Exception as exc:  # the stream's last word, whatever broke
        log.exception("a streamed turn failed")
        message = f"the turn failed ({type(exc).__name__}); the server log has the details"
        if dialect == "native":
            yield sse("error", _error("turn_failed", message, request_id))
        else:
            yield sse(None, _error("run_failed", message, request_id))
            yield sse(None, "[DONE]")
        return
    if not finished:
        message = "the turn ended without a result"
        if dialect == "native":
            yield sse("error", _error("turn_failed", message, request_id))
        else:
            yield sse(None, "[DONE]")
