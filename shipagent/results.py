"""What a run gives back: :class:`AgentResult`, :class:`ToolCallRecord` and :class:`StepEvent`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_ai.usage import RunUsage

__all__ = ["AgentResult", "StepEvent", "StepType", "ToolCallRecord"]

StepType = Literal["assistant", "step_finish", "compaction", "retry", "done"]


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One tool call of a run: what was asked, what came back, whether it worked."""

    tool: str
    input: dict[str, Any]
    output: str
    success: bool
    error: str | None = None


@dataclass(slots=True)
class AgentResult:
    """The outcome of :meth:`ShipAgent.run`.

    ``success`` is ``False`` only when the run itself failed (model or provider error, a limit);
    a failing tool makes ``had_tool_failure`` true and appends a "Tool errors:" list to ``output``
    while the run still succeeds, because the model saw the failure and answered anyway.
    """

    success: bool
    output: str
    request_id: str
    had_tool_failure: bool = False
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    usage: RunUsage = field(default_factory=RunUsage)


@dataclass(frozen=True, slots=True)
class StepEvent:
    """A progress report sent to ``on_step`` while a run executes.

    Types: ``assistant`` (text the model said), ``step_finish`` (one short summary per tool call,
    at most 500 characters), ``compaction`` (the chat's history was compacted), ``retry`` (a model
    request failed for a passing reason and is tried again: ``data`` has ``attempt``, ``of``,
    ``delaySeconds``, ``error``), ``done``.
    """

    type: StepType
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)
