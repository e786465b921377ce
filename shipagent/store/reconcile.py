"""Make the transcript and the agent-context log agree with the message log after a crash.

A turn is committed by three appends in order: the message log (the model's truth), then the
transcript, then the agent-context log. A process killed between them (or a disk that fills up
after the first) leaves the newest turns in the message log but missing from the other two. When
a chat is hydrated, :func:`reconcile` appends what is missing, rebuilt from the turn's messages and
marked ``"recovered": true``, so every store tells the same story.

Cost: only the tails are read, backwards. Turns are committed one at a time per chat, so what is
missing is always the newest few turns: the walk over the message log stops at the first turn both
logs hold, and each log is read back only until its entries are older than the turn looked for
(a turn's log entries are written after its message-log record, so they cannot be older).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)

from .. import jsonl
from .._steps import call_outcomes, tool_call_records
from .logs import AgentContextLog, MessageLog, Transcript, record_messages

__all__ = ["RecoveredTurn", "reconcile"]

log = logging.getLogger("shipagent.window")

_CLOCK_SLACK = timedelta(seconds=5)
"""How far a log's entries may look older than the turn they record (the wall clock may step)."""
_NOT_SPOKEN = ("handover-",)
"""Request-id prefixes of message-log turns nobody said (a delegate's seeded history)."""


@dataclass
class RecoveredTurn:
    """What the transcript and the agent-context log need for one turn, rebuilt from its messages."""

    request_id: str
    user_text: str
    said: str
    sent: list[str]
    tool_calls: list[dict[str, Any]]

    @classmethod
    def from_messages(cls, request_id: str, messages: list[ModelMessage]) -> RecoveredTurn:
        user = ""
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, UserPromptPart) and not user:
                        content = part.content
                        user = content if isinstance(content, str) else " ".join(str(c) for c in content)
        sent: list[str] = []
        said = ""
        for message in messages:
            if not isinstance(message, ModelResponse):
                continue
            for p in message.parts:
                if isinstance(p, ToolCallPart) and p.tool_name == "chat_send":
                    text = p.args_as_dict().get("text")
                    if isinstance(text, str):
                        sent.append(text)
            texts = [p.content for p in message.parts if isinstance(p, TextPart)]
            if texts:
                said = "".join(texts).strip()
        return cls(request_id, user, said, sent, call_outcomes(tool_call_records(messages)))


def _when(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass
class _Tail:
    """One log read backwards on demand: does it hold request ``R`` (written at ``ts`` or later)?"""

    path: Path
    seen: set[str] = field(default_factory=set)
    oldest: datetime | None = None
    exhausted: bool = False
    _lines: Iterator[Any] | None = None

    def holds(self, request_id: str, ts: datetime | None) -> bool:
        if request_id in self.seen:
            return True
        if self._lines is None:
            self._lines = jsonl.iter_objects_backward(self.path)
        while not self.exhausted:
            if ts is not None and self.oldest is not None and self.oldest < ts - _CLOCK_SLACK:
                return False  # everything further back was written before this turn existed
            entry = next(self._lines, None)
            if entry is None:
                self.exhausted = True
                break
            if not isinstance(entry, dict):
                continue
            when = _when(entry.get("ts"))
            if when is not None and (self.oldest is None or when < self.oldest):
                self.oldest = when
            rid = entry.get("requestId")
            if isinstance(rid, str):
                self.seen.add(rid)
                if rid == request_id:
                    return True
        return False


def reconcile(log_: MessageLog, transcript: Transcript, agent_context: AgentContextLog, chat_key: str) -> int:
    """Append the turns the message log holds but the transcript / agent-context log lack.

    Returns how many entries were appended (0 when the stores already agree, the usual case).
    """
    path = log_.path(chat_key)
    tails = {
        "transcript": _Tail(transcript.path(chat_key)),
        "agent-context": _Tail(agent_context.path(chat_key)),
    }
    missing: dict[str, list[RecoveredTurn]] = {name: [] for name in tails}
    open_ = set(tails)
    for record in jsonl.iter_objects_backward(path):
        if not open_:
            break
        if not isinstance(record, dict) or record.get("t") != "turn":
            continue
        request_id = record.get("requestId")
        if not isinstance(request_id, str) or request_id.startswith(_NOT_SPOKEN):
            continue
        ts = _when(record.get("ts"))
        turn: RecoveredTurn | None = None
        for name in sorted(open_):
            if tails[name].holds(request_id, ts):
                open_.discard(name)  # older turns were written before this one: all there
                continue
            if turn is None:
                messages = record_messages(record, "messages", path)
                if messages is None:
                    break
                turn = RecoveredTurn.from_messages(request_id, messages)
            missing[name].append(turn)
    added = 0
    for turn in reversed(missing["transcript"]):
        transcript.append_turn(
            chat_key, turn.request_id, turn.user_text, turn.said, sent=turn.sent, recovered=True
        )
        added += 1
    for turn in reversed(missing["agent-context"]):
        agent_context.append(
            chat_key, turn.request_id, turn.user_text, turn.said, turn.tool_calls, recovered=True
        )
        added += 1
    if added:
        log.warning(
            "chat %r: recovered %d transcript and %d agent-context entries from the message log "
            "(a crash or a failed write had left them out)",
            chat_key,
            len(missing["transcript"]),
            len(missing["agent-context"]),
        )
    return added
