"""Injected messages as data: recorded in the injecting tool call's result, rebuilt from messages.

A tool calls ``current_tool_context().inject_system_message_once(...)``; that API is unchanged.
What changes is where the injection lives for the rest of the run. :class:`InjectionToolset`
collects the injections each tool call made and returns them in the call's ``ToolReturn``
metadata (``{"shipagent.injections": [...]}``; metadata is kept by pydantic-ai and never sent to
the model). The context window (:mod:`shipagent.window.placement`) then rebuilds the run's
injections from the run's own messages before every request — deduplicated by fingerprint,
capped per run — instead of reading the contextvar. Why: anything that rebuilds a run from its
messages (a durable turn replayed after a crash, a tool run as a separate step) still has them,
and each injection stays attributed to the tool call that made it (the ledger shows that).

Injections live for one run — the chat's stored history must not keep them — so
:func:`strip_injections` removes the metadata key when a turn is committed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart

__all__ = [
    "INJECTIONS_KEY",
    "InjectedMessage",
    "RunInjection",
    "run_injections",
    "strip_injections",
]

INJECTIONS_KEY = "shipagent.injections"
"""The ``ToolReturn.metadata`` key holding a call's injections (a list of JSON objects)."""


@dataclass(frozen=True, slots=True)
class InjectedMessage:
    """One accepted injection: travels as data in the injecting tool's ``ToolReturn`` metadata."""

    role: Literal["system", "assistant"]
    content: str
    fingerprint: str

    def to_json(self) -> dict[str, str]:
        """The form stored in a ``ToolReturnPart``'s metadata."""
        return {"role": self.role, "content": self.content, "fingerprint": self.fingerprint}

    @classmethod
    def from_json(cls, data: Any) -> InjectedMessage | None:
        """Read :meth:`to_json` back; anything malformed is ``None`` (never raises)."""
        if not isinstance(data, dict):
            return None
        role, content, fingerprint = data.get("role"), data.get("content"), data.get("fingerprint")
        if role not in ("system", "assistant") or not isinstance(content, str) or not content:
            return None
        if not isinstance(fingerprint, str) or not fingerprint:
            return None
        return cls(role, content, fingerprint)


@dataclass(frozen=True, slots=True)
class RunInjection:
    """An injection of this run with the tool call that made it."""

    message: InjectedMessage
    tool_call_id: str
    timestamp: datetime | None = None
    """When the injecting call returned: the injected message's time, so rebuilding is exact."""


def _records(part: ToolReturnPart[Any]) -> Iterable[InjectedMessage]:
    meta = part.metadata
    items = meta.get(INJECTIONS_KEY) if isinstance(meta, dict) else None
    if not isinstance(items, list):
        return
    for item in items:
        message = InjectedMessage.from_json(item)
        if message is not None:
            yield message


def run_injections(messages: Sequence[ModelMessage], limit: int) -> list[RunInjection]:
    """The injections recorded in ``messages`` (a run's own messages), in order.

    Order is message order, then tool-result order within a request (the order of the calls), so
    it is the same every time it is rebuilt. The first occurrence of a fingerprint wins and at
    most ``limit`` are returned — the same rules ``inject_*_once`` applies to its caller.
    """
    seen: set[str] = set()
    out: list[RunInjection] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if not isinstance(part, ToolReturnPart):
                continue
            for injected in _records(part):
                if injected.fingerprint in seen or len(out) >= limit:
                    continue
                seen.add(injected.fingerprint)
                out.append(RunInjection(injected, part.tool_call_id, part.timestamp))
    return out


def _strip_part(part: Any) -> Any:
    if not isinstance(part, ToolReturnPart) or not isinstance(part.metadata, dict):
        return part
    if INJECTIONS_KEY not in part.metadata:
        return part
    rest = {k: v for k, v in part.metadata.items() if k != INJECTIONS_KEY}
    if set(rest) == {"tool"}:
        rest_value: Any = rest["tool"]  # undo attach_injections' wrapping of foreign metadata
    else:
        rest_value = rest or None
    return dataclasses.replace(part, metadata=rest_value)


def strip_injections(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """``messages`` without injection records (what a turn persists); unchanged messages are reused."""
    out: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelRequest) and any(
            isinstance(p, ToolReturnPart) and isinstance(p.metadata, dict) and INJECTIONS_KEY in p.metadata
            for p in message.parts
        ):
            message = dataclasses.replace(message, parts=[_strip_part(p) for p in message.parts])
        out.append(message)
    return out
