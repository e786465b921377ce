"""The plumbing behind :meth:`ShipAgent.run_stream`: events out of a running turn, approvals in.

Why a background task and a memory stream, instead of driving pydantic-ai's ``Agent.iter`` inside
the async generator: a tool that needs approval waits *inside* the agent run, and the consumer must
see :class:`~shipagent.events.ApprovalRequired` while it waits. If the generator itself drove the
run, it would be suspended in the tool and could not yield. So the turn runs in its own task and
pushes events into a bounded memory stream (back-pressure: a slow HTTP client slows the producer,
it never buffers a whole answer); the generator only reads the stream. The generator never yields
from inside a task group or cancel scope (anyio forbids that across a ``yield``); when the consumer
leaves — ``break``, ``aclose()``, its task cancelled — the ``finally`` cancels the turn's task and
waits for it under a shield, so the chat's lock is released before anyone can start the next turn.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from pydantic_ai.exceptions import ModelRequestTimeout
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolReturnPart,
)
from pydantic_ai.models.wrapper import WrapperModel

from .._steps import tool_failure, tool_summary
from ..events import ApprovalRequired, Done, RunEvent, TextDelta, ToolFinished, ToolStarted
from ..results import AgentResult, FinishReason
from ..tools import request_approval
from ..tools.execution import ApprovalCallback, ApprovalRequest

__all__ = [
    "ApprovalTimeoutError",
    "Emit",
    "PendingApprovals",
    "approval_bridge",
    "can_stream",
    "emit_response_text",
    "finish_reason_of",
    "keep_cut_answer",
    "stream_model_request",
    "stream_tool_calls",
    "stream_turn",
]

Emit = Callable[[RunEvent], Awaitable[None]]
"""Where a running turn sends its events."""
STREAM_BUFFER = 64
"""Events buffered between a turn and a slow consumer before the turn waits for it."""


async def stream_turn(produce: Callable[[Emit], Awaitable[AgentResult]]) -> AsyncGenerator[RunEvent, None]:
    """Run ``produce(emit)`` in a task and yield what it emits, then :class:`Done` with its result."""
    send, receive = anyio.create_memory_object_stream[RunEvent](STREAM_BUFFER)

    async def producer() -> None:
        async with send:
            result = await produce(send.send)
            await send.send(Done(result))

    task = asyncio.get_running_loop().create_task(producer())
    try:
        async with receive:
            async for event in receive:
                yield event
        await task  # a crash of the turn itself (a bug) reaches the consumer
    finally:
        if not task.done():
            task.cancel()
            # Shielded: the consumer may be cancelled itself; the turn must be gone (lock released,
            # nothing half-committed) before control returns to it.
            with anyio.CancelScope(shield=True):
                await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # retrieved: a turn that died after the consumer left is not "never retrieved"


def can_stream(model: Any) -> bool:
    """Whether ``model`` answers streamed requests (a ``FunctionModel`` needs a ``stream_function``).

    Looks through wrappers (``WrapperModel``: retries, instrumentation) to the model that answers.
    """
    while isinstance(model, WrapperModel):
        model = model.wrapped
    # pydantic-ai's function-model module costs ~30 ms to import (its batch machinery): look it up
    # only if someone loaded it, since a FunctionModel cannot exist before its module does.
    function_models = sys.modules.get("pydantic_ai.models.function")
    if function_models is None:
        return True
    return not (isinstance(model, function_models.FunctionModel) and model.stream_function is None)


async def emit_response_text(response: ModelResponse, emit: Emit) -> None:
    """A response that was not streamed reaches the consumer as one :class:`TextDelta`."""
    text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
    if text:
        await emit(TextDelta(text))


async def stream_model_request(node: Any, graph_ctx: Any, emit: Emit) -> ModelResponse | None:
    """Run a model-request node as a streamed request, emitting its text as :class:`TextDelta`s.

    Returns ``None`` when the response is complete. When ``llm.timeoutSeconds`` (pydantic-ai's
    ``request_timeout``) ran out after the answer had begun, returns the response as far as it
    came: the user has seen that text, so it is not thrown away with a failed run; the caller
    ends the run there and keeps it (:func:`keep_cut_answer`). A timeout before any text
    arrived is raised, as every other failure.
    """
    said = False
    stream: Any = None
    try:
        async with node.stream(graph_ctx) as stream:
            async for event in stream:
                text = ""
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    text = event.part.content
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    text = event.delta.content_delta
                if text:
                    said = True
                    await emit(TextDelta(text))
    except ModelRequestTimeout:
        if not said or stream is None:
            raise
        partial: ModelResponse = stream.response
        return partial
    return None


def keep_cut_answer(messages: list[ModelMessage], partial: ModelResponse) -> tuple[list[ModelMessage], str]:
    """The messages and answer of a run whose last response the time limit cut (``partial``).

    pydantic-ai appends the interrupted response to the run's messages (with the run's ids and
    usage); when it did not, ``partial`` takes its place. Only the text is kept: a tool call that
    was still being written has no result and would make the next request invalid. The response
    is marked ``state="interrupted"``, which is how :func:`finish_reason_of` (and a later reader
    of the history) knows the answer was cut by time.
    """
    last = messages[-1] if messages else None
    if isinstance(last, ModelResponse) and last.state != "complete":  # pydantic-ai's record of it
        messages, partial = messages[:-1], last
    texts = [p for p in partial.parts if isinstance(p, TextPart)]
    kept = replace(partial, parts=texts, state="interrupted")
    return [*messages, kept], "".join(p.content for p in texts)


def finish_reason_of(messages: list[ModelMessage]) -> FinishReason:
    """Why the answer of a run that produced ``messages`` ended: its last response decides.

    pydantic-ai normalizes the provider's reason (``"stop"``, ``"length"``, ``"content_filter"``,
    ``"tool_call"``, ``"error"`` or ``None`` when the provider gave none); a response cut by
    the time limit while streaming is ``"interrupted"`` instead of complete.
    """
    last = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    if last is None:
        return "stop"
    if last.state == "interrupted":
        return "timeout"
    reason = last.finish_reason
    if reason in ("length", "content_filter", "error"):
        return reason
    return "stop"  # "stop", "tool_call" (the answer came after the tools), or not said


async def stream_tool_calls(node: Any, graph_ctx: Any, emit: Emit, is_mcp: Callable[[str], bool]) -> None:
    """Run a call-tools node, emitting :class:`ToolStarted` / :class:`ToolFinished` as tools run."""
    args: dict[str, dict[str, Any]] = {}
    async with node.stream(graph_ctx) as stream:
        async for event in stream:
            if isinstance(event, FunctionToolCallEvent):
                part = event.part
                args[part.tool_call_id] = part.args_as_dict()
                await emit(ToolStarted(part.tool_call_id, part.tool_name, args[part.tool_call_id]))
            elif isinstance(event, FunctionToolResultEvent):
                result: Any = event.part
                name = str(getattr(result, "tool_name", "") or "")
                if isinstance(result, ToolReturnPart):
                    content: Any = result.content
                else:  # a retry prompt: bad arguments, or the tool asked the model to try again
                    content = {"success": False, "error": result.model_response()}
                summary = tool_summary(name, args.get(result.tool_call_id, {}), content, is_mcp=is_mcp(name))
                success = tool_failure(content) is None
                await emit(ToolFinished(result.tool_call_id, name, success, summary))


class ApprovalTimeoutError(TimeoutError):
    """Nobody answered an approval in time; the command is refused."""


@dataclass(eq=False)
class _Pending:
    chat_key: str
    answered: anyio.Event = field(default_factory=anyio.Event)
    approved: bool = False


class PendingApprovals:
    """The approvals streamed turns are waiting for, by id (one per agent)."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}

    def open(self, chat_key: str) -> str:
        approval_id = uuid.uuid4().hex
        self._pending[approval_id] = _Pending(chat_key)
        return approval_id

    def chat_key_of(self, approval_id: str) -> str | None:
        """The chat an open approval belongs to, or ``None`` when it is not (or no longer) waiting."""
        pending = self._pending.get(approval_id)
        return pending.chat_key if pending is not None else None

    def resolve(self, approval_id: str, approved: bool) -> bool:
        """Answer an open approval; ``False`` when it is unknown, answered or timed out already."""
        pending = self._pending.get(approval_id)
        if pending is None or pending.answered.is_set():
            return False
        pending.approved = approved is True
        pending.answered.set()
        return True

    async def wait(self, approval_id: str, limit: float | None) -> bool:
        """The answer to ``approval_id``; raises :class:`ApprovalTimeoutError` after ``limit`` s."""
        pending = self._pending[approval_id]
        with anyio.move_on_after(limit):
            await pending.answered.wait()
        if not pending.answered.is_set():
            raise ApprovalTimeoutError(f"no answer within {limit:g} s")
        return pending.approved

    def discard(self, approval_id: str) -> None:
        """Forget an approval (answered, timed out, or its turn was cancelled)."""
        self._pending.pop(approval_id, None)


def approval_bridge(
    approvals: PendingApprovals,
    emit: Emit,
    chat_key: str,
    fallback: ApprovalCallback | None,
    timeout: float | None,
) -> ApprovalCallback:
    """The ``on_approval`` of a streamed turn: announce the question, then wait for the answer.

    With an agent-wide ``on_approval`` callback (``fallback``) that callback still decides, as in
    :meth:`ShipAgent.run`; the event only tells the consumer what is being asked. Without one the
    answer comes from :meth:`ShipAgent.resolve_approval`, within ``timeout`` seconds (``None``:
    until the turn ends). An unanswered question is a refusal.
    """

    async def ask(request: ApprovalRequest) -> bool:
        if fallback is not None:  # the callback answers; the event only tells the consumer
            await emit(ApprovalRequired(uuid.uuid4().hex, request.tool, request.command))
            approved, _ = await request_approval(fallback, request)
            return approved
        approval_id = approvals.open(chat_key)
        try:
            await emit(ApprovalRequired(approval_id, request.tool, request.command))
            return await approvals.wait(approval_id, timeout)
        finally:
            approvals.discard(approval_id)

    return ask
