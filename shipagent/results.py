"""What a run gives back (:class:`AgentResult`, :class:`ToolCallRecord`, :class:`StepEvent`) and who said it (:class:`Sender`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic_ai.usage import RunUsage

__all__ = [
    "AgentResult",
    "BudgetRefusal",
    "FinishReason",
    "Sender",
    "StepEvent",
    "StepType",
    "ToolCallRecord",
    "cut_notice",
]

StepType = Literal["assistant", "step_finish", "compaction", "retry", "done"]

FinishReason = Literal["stop", "length", "timeout", "content_filter", "error", "budget"]
"""Why a turn's answer ended (see :attr:`AgentResult.finish_reason`)."""


@dataclass(frozen=True, slots=True)
class Sender:
    """Who said a turn's text: one person of a chat that has many (a group on a chat platform).

    Passed as ``ShipAgent.run(..., sender=Sender("7", "Ada"))``: the transcript's user line records
    it (``"sender": {"id": "7", "name": "Ada"}``) and the model reads the text as
    ``Ada (id 7): …``, so in a group it knows who said what. ``id`` is the platform's stable user
    id; ``name`` the display name at the time (it may change, the id does not).
    """

    id: str
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or not self.id.isprintable() or len(self.id) > 200:
            raise ValueError("Sender.id must be 1-200 printable characters")
        if not isinstance(self.name, str) or len(self.name) > 200:
            raise ValueError("Sender.name must be a string of at most 200 characters")

    @property
    def label(self) -> str:
        """How the model and the transcript views name the sender: ``Ada (id 7)``, or ``id 7``."""
        name = " ".join(self.name.split())
        return f"{name} (id {self.id})" if name else f"id {self.id}"

    def to_json(self) -> dict[str, str]:
        """The transcript's ``sender`` field (``name`` left out when empty)."""
        return {"id": self.id, "name": self.name} if self.name else {"id": self.id}

    @classmethod
    def from_json(cls, data: Any) -> Sender | None:
        """The sender a transcript line records, or ``None`` (no field, or one this cannot read)."""
        if not isinstance(data, dict):
            return None
        sid, name = data.get("id"), data.get("name", "")
        if not isinstance(sid, str):
            return None
        try:
            return cls(sid, name if isinstance(name, str) else "")
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One tool call of a run: what was asked, what came back, whether it worked."""

    tool: str
    input: dict[str, Any]
    output: str
    success: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class BudgetRefusal:
    """Why a turn was refused before it ran: its chat used up one of its budgets (``context.budgets``).

    ``setting`` names the budget as ship.json spells it (``context.budgets.tokensPerDay``);
    ``used`` and ``limit`` are tokens or cost (``unit``); ``resets_at`` is when the period ends
    (00:00 UTC of the next day or month) and ``retry_after`` the seconds from the refusal until
    then, rounded up (an HTTP host's ``Retry-After``).
    """

    setting: str
    unit: Literal["tokens", "cost"]
    period: Literal["day", "month"]
    used: float
    limit: float
    resets_at: datetime
    retry_after: int

    def message(self) -> str:
        """The refusal in words for the user: the budget, its use, when it resets and how soon."""
        if self.unit == "tokens":
            what = f"used {self.used:,.0f} of its {self.limit:,.0f} tokens"
        else:
            what = f"spent {_amount(self.used)} of its {_amount(self.limit)}"
        when = (
            f"{self.resets_at:%H:%M} UTC"
            if self.period == "day"
            else f"{self.resets_at:%Y-%m-%d} at 00:00 UTC"
        )
        span = "today" if self.period == "day" else "this month"
        return (
            f"This chat has {what} for {span} ({self.setting}); it resets "
            f"{'at' if self.period == 'day' else 'on'} {when} (in {_duration(self.retry_after)})."
        )

    def to_json(self) -> dict[str, Any]:
        """The refusal as camelCase JSON (the HTTP API's error body carries it)."""
        return {
            "budget": self.setting,
            "unit": self.unit,
            "period": self.period,
            "used": self.used,
            "limit": self.limit,
            "resetsAt": self.resets_at.isoformat().replace("+00:00", "Z"),
            "retryAfterSeconds": self.retry_after,
        }


def _amount(value: float) -> str:
    return f"{value:,.6f}".rstrip("0").rstrip(".")


def _duration(seconds: int) -> str:
    """``3 d 17 h``, ``3 h 12 min``, ``5 min``: how long until a budget resets, to the minute."""
    minutes = max((seconds + 59) // 60, 1)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {mins} min" if mins else f"{hours} h"
    return f"{mins} min"


@dataclass(slots=True)
class AgentResult:
    """The outcome of :meth:`ShipAgent.run`.

    ``success`` is ``False`` only when the run itself failed (model or provider error, a limit);
    a failing tool makes ``had_tool_failure`` true and appends a "Tool errors:" list to ``output``
    while the run still succeeds, because the model saw the failure and answered anyway.

    ``finish_reason`` says whether the answer is whole. An answer that was cut is still an
    answer: the run succeeds, the text is in ``output`` and in the chat's history (so the user
    can ask the model to go on), and :attr:`cut` is true so every host can say so:

    - ``"stop"``: the model finished its answer (also when the provider does not say why);
    - ``"length"``: the model hit its output token limit (``llm.maxTokens``);
    - ``"timeout"``: ``llm.timeoutSeconds`` ran out while the answer was being streamed; the
      text that had arrived is the answer;
    - ``"content_filter"``: the provider withheld the rest;
    - ``"error"``: the run failed (``success`` is ``False``), or the provider ended the answer
      with an error of its own after sending part of it;
    - ``"budget"``: the turn was refused before it ran, because its chat used up a budget
      (``context.budgets``); :attr:`budget` says which and when it resets, ``output`` says it
      in words, and nothing of the turn is in the chat.
    """

    success: bool
    output: str
    request_id: str
    had_tool_failure: bool = False
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    usage: RunUsage = field(default_factory=RunUsage)
    finish_reason: FinishReason = "stop"
    budget: BudgetRefusal | None = None
    """Set when the turn was refused for its chat's budget (``finish_reason == "budget"``)."""

    @property
    def cut(self) -> bool:
        """Whether a successful run's answer stopped before the model finished it."""
        return self.success and self.finish_reason != "stop"

    def to_json(self) -> dict[str, Any]:
        """This result as camelCase JSON: what ``shipagent run --json`` prints and the HTTP API sends.

        One definition for both, so the command line and the server can never name a field differently.
        """
        return {
            "success": self.success,
            "output": self.output,
            "requestId": self.request_id,
            "finishReason": self.finish_reason,
            "hadToolFailure": self.had_tool_failure,
            "toolCalls": [
                {"tool": r.tool, "input": r.input, "output": r.output, "success": r.success, "error": r.error}
                for r in self.tool_calls
            ],
            "usage": {
                "requests": self.usage.requests,
                "inputTokens": self.usage.input_tokens,
                "outputTokens": self.usage.output_tokens,
                "toolCalls": self.usage.tool_calls,
            },
            **({"budget": self.budget.to_json()} if self.budget is not None else {}),
        }


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


def cut_notice(
    result: AgentResult, *, max_tokens: int | None = None, timeout_seconds: float | None = None
) -> str | None:
    """One line telling a person that ``result``'s answer was cut, and what to change; ``None`` if whole.

    ``max_tokens`` and ``timeout_seconds`` are the agent's ``llm.maxTokens`` and
    ``llm.timeoutSeconds``, named in the line so the user knows which knob cut the answer.
    """
    if not result.cut:
        return None
    reason = result.finish_reason
    if reason == "length":
        limit = f"llm.maxTokens = {max_tokens}" if max_tokens is not None else "the model's default"
        return (
            f"answer cut: the model reached its output token limit ({limit}). Ask it to continue, "
            "or raise llm.maxTokens in ship.json."
        )
    if reason == "timeout":
        limit = (
            f"llm.timeoutSeconds = {timeout_seconds:g}" if timeout_seconds is not None else "the time limit"
        )
        return (
            f"answer cut: the time limit ran out while it was being written ({limit}). What arrived "
            "is kept in the chat; ask it to continue, or raise llm.timeoutSeconds in ship.json."
        )
    if reason == "content_filter":
        return "answer cut: the provider's content filter withheld the rest."
    return "answer cut: the provider ended it with an error after sending part of it."
