"""Step reporting and tool-call records, derived from the messages a run produced.

The user sees summaries, not raw tool output: one ``step_finish`` line per tool
call (≤ 500 characters), assistant text without exact repeats, and ``done``.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)

from .results import StepEvent, ToolCallRecord

__all__ = [
    "StepReporter",
    "call_outcomes",
    "final_output",
    "tool_call_records",
    "tool_failure",
    "tool_output_text",
    "tool_summary",
]

log = logging.getLogger("shipagent.steps")
StepCallback = Callable[[StepEvent], "Awaitable[None] | None"]
SUMMARY_CHARS = 500


def tool_output_text(content: Any) -> str:
    """A tool result as text (dicts and lists as compact JSON)."""
    if isinstance(content, str):
        return content
    try:
        return json.dumps(content, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(content)


def _failure(content: Any) -> str | None:
    """The error of a ``{success: false, ...}`` result, else ``None``."""
    if isinstance(content, dict) and content.get("success") is False:
        error = content.get("error") or content.get("stderr") or "tool reported success: false"
        return str(error)
    return None


def tool_failure(content: Any) -> str | None:
    """The error a tool result reports (``{"success": false, ...}``), or ``None`` for a success."""
    return _failure(content)


def tool_summary(name: str, args: dict[str, Any], content: Any, *, is_mcp: bool = False) -> str:
    """The ≤ 500-character ``step_finish`` text for one tool call."""
    if name == "exec_shell" and isinstance(content, dict):
        command = str(args.get("command", ""))
        exit_code = content.get("exitCode", "?")
        output = str(content.get("stdout") or "") + str(content.get("stderr") or "")
        if content.get("error") and not output:
            output = str(content["error"])
        head = f"ran: {command} (exit {exit_code})"
        text = f"{head}\n{output[:SUMMARY_CHARS]}" if output else head
    elif is_mcp:
        text = f"MCP tool {name}\n{tool_output_text(content)[:SUMMARY_CHARS]}"
    else:
        error = _failure(content)
        text = f"{name}: failed: {error}" if error else f"{name}: done"
    return text[:SUMMARY_CHARS]


def call_outcomes(records: Sequence[ToolCallRecord]) -> list[dict[str, Any]]:
    """``{"tool", "success", "error"}`` per call: what the agent-context log keeps of a turn's tools."""
    return [{"tool": r.tool, "success": r.success, "error": r.error} for r in records]


def tool_call_records(messages: Sequence[ModelMessage]) -> list[ToolCallRecord]:
    """Pair every tool call in ``messages`` with its result, in call order."""
    calls: dict[str, ToolCallPart] = {}
    order: list[str] = []
    results: dict[str, ToolCallRecord] = {}
    for message in messages:
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, ToolCallPart):
                    calls[part.tool_call_id] = part
                    order.append(part.tool_call_id)
        elif isinstance(message, ModelRequest):
            for rpart in message.parts:
                call = calls.get(getattr(rpart, "tool_call_id", ""))
                if call is None:
                    continue
                args = call.args_as_dict()
                if isinstance(rpart, ToolReturnPart):
                    error = _failure(rpart.content)
                    results[call.tool_call_id] = ToolCallRecord(
                        tool=call.tool_name,
                        input=args,
                        output=tool_output_text(rpart.content),
                        success=error is None,
                        error=error,
                    )
                elif isinstance(rpart, RetryPromptPart):
                    text = rpart.model_response()
                    results[call.tool_call_id] = ToolCallRecord(
                        tool=call.tool_name, input=args, output=text, success=False, error=text
                    )
    return [results[i] for i in order if i in results]


class StepReporter:
    """Sends :class:`StepEvent`s to a sync or async callback; its exceptions are logged, not raised."""

    def __init__(
        self,
        callback: StepCallback | None,
        is_mcp: Callable[[str], bool],
        *,
        emit: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self._callback = callback
        self._emit = emit
        self._is_mcp = is_mcp
        self._last_text: str | None = None
        self._calls: dict[str, ToolCallPart] = {}

    async def emit(self, event: StepEvent) -> None:
        if self._callback is None:
            return
        try:
            outcome = self._callback(event)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            log.exception("on_step callback raised for a %s event; ignoring it", event.type)

    @property
    def streaming(self) -> bool:
        """Whether a consumer takes run events (``run_stream``), so requests and tools are streamed."""
        return self._emit is not None

    async def event(self, event: Any) -> None:
        """Send a run event (``shipagent.events``) to the stream's consumer, if there is one."""
        if self._emit is not None:
            await self._emit(event)

    async def on_response(self, response: ModelResponse) -> None:
        text = "\n".join(p.content for p in response.parts if isinstance(p, TextPart)).strip()
        text = " ".join(text.split(" ")) if text else text
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                self._calls[part.tool_call_id] = part
        if text and text != self._last_text:
            self._last_text = text
            await self.emit(StepEvent("assistant", text))

    async def on_request(self, request: ModelRequest) -> None:
        for part in request.parts:
            if not isinstance(part, ToolReturnPart | RetryPromptPart) or not part.tool_call_id:
                continue
            call = self._calls.pop(part.tool_call_id, None)
            if call is None:
                continue
            args = call.args_as_dict()
            content: Any = (
                part.content
                if isinstance(part, ToolReturnPart)
                else {"success": False, "error": part.model_response()}
            )
            summary = tool_summary(call.tool_name, args, content, is_mcp=self._is_mcp(call.tool_name))
            await self.emit(
                StepEvent("step_finish", summary, {"tool": call.tool_name, "toolCallId": call.tool_call_id})
            )


def final_output(output: str, sent: Sequence[str], records: Sequence[ToolCallRecord]) -> str:
    """A turn's ``AgentResult.output``: what ``chat_send`` sent without a channel, the answer, failures."""
    pieces: list[str] = [t for t in sent if t.strip()]
    if output.strip() and (not pieces or output.strip() != pieces[-1].strip()):
        pieces.append(output.strip())
    failures = [r for r in records if not r.success]
    if failures:
        lines = "\n".join(f"- {r.tool}: {(r.error or '')[:200]}" for r in failures)
        pieces.append(f"Tool errors:\n{lines}")
    return "\n\n".join(pieces)
