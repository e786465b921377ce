"""Streaming responses for the server: SSE that notices a client leaving, and the two SSE dialects.

Starlette's ``StreamingResponse`` watches for ``http.disconnect`` only on ASGI servers older than
spec 2.4; on newer ones it notices a gone client only when the next write fails. A turn that is
thinking (or waiting for an approval) writes nothing for a while, and it must stop as soon as its
client is gone, so :class:`EventStream` always listens for the disconnect and cancels the body,
which cancels the turn (``run_stream``'s consumer left: nothing is committed).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ...events import ApprovalRequired, Compacted, Done, RunEvent, TextDelta, ToolStarted
from ._openai import chunk
from ._wire import event_json, sse

__all__ = ["SSE_HEADERS", "EventStream", "native_events", "openai_chunks"]

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
OnApproval = Callable[[ApprovalRequired], None]


class EventStream(StreamingResponse):
    """``text/event-stream`` whose body is cancelled the moment the client disconnects."""

    media_type = "text/event-stream"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:

            async def body() -> None:
                with contextlib.suppress(OSError):  # the client went away mid-write
                    await self.stream_response(send)
                group.cancel_scope.cancel()

            group.start_soon(body)
            await self.listen_for_disconnect(receive)
            group.cancel_scope.cancel()


async def native_events(
    events: AsyncGenerator[RunEvent, None], on_approval: OnApproval, *, notice: bool = True
) -> AsyncIterator[bytes]:
    """One SSE per event: ``event:`` is the type, ``data:`` its fields as camelCase JSON.

    ``compacted`` also carries ``notice``: the line to show the user (:attr:`Compacted.NOTICE`),
    or ``null`` when ship.json ``context.chatHistory.notice`` is false. The event itself always
    goes out (a program may count compactions); whether a person is told is the server's setting,
    so the web page shows what it is given.
    """
    async with aclosing(events) as stream:
        async for event in stream:
            if isinstance(event, ApprovalRequired):
                on_approval(event)
            data = event_json(event)
            if isinstance(event, Compacted):
                data["notice"] = Compacted.NOTICE if notice else None
            yield sse(event.type, data)


async def openai_chunks(
    events: AsyncGenerator[RunEvent, None], model: str, on_approval: OnApproval
) -> AsyncIterator[bytes]:
    """``chat.completion.chunk`` deltas, then the finishing chunk with usage, then ``[DONE]``.

    Text the model writes and text it sends with ``chat_send`` become content deltas. An approval
    question is an SSE comment (OpenAI clients skip comments; a client that knows shipagent can
    answer it through ``POST /v1/approvals/{id}``). A failed turn ends with an ``error`` object,
    which the OpenAI SDKs raise as an ``APIError``.
    """
    created = int(time.time())
    completion_id = ""
    started = False
    async with aclosing(events) as stream:
        async for event in stream:
            if not started:
                started = True
                completion_id = f"chatcmpl-{uuid.uuid4().hex}"
                yield sse(None, chunk(completion_id, model, created, role=True, content=""))
            if isinstance(event, TextDelta):
                yield sse(None, chunk(completion_id, model, created, content=event.text))
            elif isinstance(event, ToolStarted) and event.tool == "chat_send":
                text = event.args.get("text")
                if isinstance(text, str) and text:
                    yield sse(None, chunk(completion_id, model, created, content=text + "\n\n"))
            elif isinstance(event, ApprovalRequired):
                on_approval(event)
                yield f": approval_required {json.dumps(event_json(event))}\n\n".encode()
            elif isinstance(event, Done):
                result = event.result
                if result.success:
                    yield sse(None, chunk(completion_id, model, created, result=result))
                else:
                    kind = "budget_exceeded" if result.budget is not None else "run_failed"
                    error = {"message": result.output, "type": kind, "requestId": result.request_id}
                    yield sse(None, {"error": error})
    yield sse(None, "[DONE]")
