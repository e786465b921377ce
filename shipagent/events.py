"""The events of a streamed turn (:meth:`ShipAgent.run_stream`).

A turn streamed to a user (a terminal, a browser over SSE, an OpenAI client) needs more than the
final :class:`~shipagent.results.AgentResult`: the answer as it is written, which tool is running
now, and a question when a command needs approval. Each event is a small frozen dataclass whose
``type`` field names it, so a consumer can ``match`` on the class or switch on the string (the
serve room uses ``type`` as the SSE ``event:`` name). :class:`Done` comes last, exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from .results import AgentResult

__all__ = [
    "ApprovalRequired",
    "Compacted",
    "Done",
    "RunEvent",
    "TextDelta",
    "ToolFinished",
    "ToolStarted",
]


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of text the model just wrote; the pieces of one response concatenate to its text."""

    text: str
    type: Literal["text_delta"] = field(default="text_delta", init=False)


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """A tool call is about to run (``args`` as the model sent them)."""

    tool_call_id: str
    tool: str
    args: dict[str, Any]
    type: Literal["tool_started"] = field(default="tool_started", init=False)


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A tool call returned; ``summary`` is the ≤ 500-character step summary, never raw output."""

    tool_call_id: str
    tool: str
    success: bool
    summary: str
    type: Literal["tool_finished"] = field(default="tool_finished", init=False)


@dataclass(frozen=True, slots=True)
class Compacted:
    """The chat's history was compacted: ``removed`` messages went into a summary, ``kept`` stayed."""

    removed: int
    kept: int
    type: Literal["compacted"] = field(default="compacted", init=False)

    NOTICE: ClassVar[str] = (
        "(Older messages were summarised to keep this chat within its context; nothing is lost "
        "— ask me to look them up.)"
    )
    """The one line channels and the web page show the user after such a turn
    (ship.json ``context.chatHistory.notice``), so a shorter memory never goes unexplained."""


@dataclass(frozen=True, slots=True)
class ApprovalRequired:
    """A tool waits for the user's permission (``exec_shell`` in ``ask`` mode).

    Answer it with :meth:`ShipAgent.resolve_approval` (``approval_id``, approved or not); the tool
    waits until then, until the stream's approval timeout, or until the turn is cancelled.
    """

    approval_id: str
    tool: str
    command: str
    type: Literal["approval_required"] = field(default="approval_required", init=False)


@dataclass(frozen=True, slots=True)
class Done:
    """The turn is over; always the last event, exactly once (also for a failed turn)."""

    result: AgentResult
    type: Literal["done"] = field(default="done", init=False)


RunEvent = TextDelta | ToolStarted | ToolFinished | Compacted | ApprovalRequired | Done
"""Any event :meth:`ShipAgent.run_stream` yields."""
