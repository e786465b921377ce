"""The items one model request carries, by section, and the edit each one got.

A request is planned as a list of :class:`Item` s — one per message — each with the section it
belongs to, its source (``history:<n>``, ``summary``, ``injection:<fingerprint>``, ``turn:<n>``),
and the edit the budget applied: ``whole``, ``cut`` (head + tail at ``cap`` tokens), ``elided``
(a tool result replaced by a stub saying how to get it back) or ``dropped``. :func:`render_item`
turns an item back into the message that is sent; it is pure and deterministic, so the ledger can
store only the decisions and rebuild the exact request later (``agent.reconstruct``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .tokens import count_tokens, cut_text, token_upper_bound

__all__ = [
    "SECTIONS",
    "Edit",
    "Item",
    "cap_message",
    "elide_message",
    "elision_stub",
    "message_facts",
    "message_tokens",
    "part_text",
    "render_item",
]

SECTIONS = ("summary", "history", "injections", "turn", "toolResults")
"""Message sections in the order they are planned (instructions and tools are measured apart)."""

Edit = Literal["whole", "cut", "elided", "dropped"]
_PER_MESSAGE_OVERHEAD = 4
Part = ModelRequestPart | ModelResponsePart


def part_text(part: Part) -> str:
    """The text a part costs tokens for."""
    if isinstance(part, UserPromptPart):
        return part.content if isinstance(part.content, str) else ""
    if isinstance(part, SystemPromptPart | TextPart):
        return part.content
    if isinstance(part, ToolReturnPart):
        return part.content if isinstance(part.content, str) else part.model_response_str()
    if isinstance(part, RetryPromptPart):
        return part.content if isinstance(part.content, str) else part.model_response()
    if isinstance(part, ToolCallPart):
        return part.args_as_json_str()
    return ""


def message_tokens(message: ModelMessage) -> int:
    """Tokens a message costs: its parts' text plus a small per-message overhead."""
    return _PER_MESSAGE_OVERHEAD + sum(count_tokens(part_text(p)) for p in message.parts)


def _call_ids(message: ModelMessage) -> tuple[str, ...]:
    return tuple(
        p.tool_call_id
        for p in message.parts
        if isinstance(p, ToolCallPart | ToolReturnPart) and p.tool_call_id
    )


_FACTS_MAX = 16384
_facts: dict[int, tuple[weakref.ref[ModelMessage], object, int, int, tuple[str, ...]]] = {}
"""``id(message)`` -> (weak reference, its parts list, their count, tokens, tool call ids)."""


def message_facts(message: ModelMessage) -> tuple[int, tuple[str, ...]]:
    """``(message_tokens(message), the tool call ids it makes or answers)``, remembered per message.

    Why: every model request plans the whole history, and a chat's messages are the same objects
    from one request (and turn) to the next; tokenising and scanning a 1,000-message history on
    every request cost more than the rest of the plan. The entry is keyed by identity and checked
    against the message's parts list (messages are replaced, never edited in place — and a list
    that was swapped or grew is counted again); a weak reference keeps no message alive, and the
    table is bounded (oldest entries go first).
    """
    key = id(message)
    hit = _facts.get(key)
    parts = message.parts
    if hit is not None and hit[0]() is message and hit[1] is parts and hit[2] == len(parts):
        return hit[3], hit[4]
    tokens, ids = message_tokens(message), _call_ids(message)
    try:
        ref = weakref.ref(message)
    except TypeError:  # pragma: no cover - pydantic-ai's messages take weak references
        return tokens, ids
    if hit is None and len(_facts) >= _FACTS_MAX:
        with contextlib.suppress(StopIteration, KeyError, RuntimeError):  # another thread got there first
            del _facts[next(iter(_facts))]
    _facts[key] = (ref, parts, len(parts), tokens, ids)
    return tokens, ids


def _cuttable(part: Part) -> bool:
    return isinstance(part, UserPromptPart | SystemPromptPart | TextPart | ToolReturnPart) or (
        isinstance(part, RetryPromptPart) and isinstance(part.content, str)
    )


def _with_content(part: Part, text: str) -> Part:
    """``part`` with its text replaced (a new part: stored messages are never edited in place)."""
    if isinstance(part, ToolReturnPart):
        return dataclasses.replace(cast("ToolReturnPart[Any]", part), content=text)
    if isinstance(part, UserPromptPart | SystemPromptPart | TextPart | RetryPromptPart):
        return dataclasses.replace(part, content=text)
    return part


def cap_message(message: ModelMessage, cap: int) -> ModelMessage:
    """``message`` with every part over ``cap`` tokens cut to head + tail (the same object if none)."""
    parts: list[Part] = []
    changed = False
    for part in message.parts:
        text = part_text(part)
        if _cuttable(part) and token_upper_bound(text) > cap and count_tokens(text) > cap:
            part = _with_content(part, cut_text(text, cap))
            changed = True
        parts.append(part)
    if not changed:
        return message
    return dataclasses.replace(message, parts=parts)  # type: ignore[arg-type]


def elision_stub(part: ToolReturnPart, hint: str) -> str:
    """The text an elided tool result is replaced by: which call it was and how to get it back."""
    return (
        f"[shipagent elided this earlier result of `{part.tool_name}` (call {part.tool_call_id}) from "
        f"this request so the newest results arrive whole; to see it again: {hint}]"
    )


def elide_message(message: ModelMessage, hints: Mapping[str, str]) -> ModelMessage:
    """``message`` with each tool result named in ``hints`` replaced by its stub."""
    if not isinstance(message, ModelRequest):
        return message
    parts: list[ModelRequestPart] = []
    for part in message.parts:
        if isinstance(part, ToolReturnPart) and part.tool_call_id in hints:
            stub = elision_stub(part, hints[part.tool_call_id])
            part = dataclasses.replace(cast("ToolReturnPart[Any]", part), content=stub)
        parts.append(part)
    return dataclasses.replace(message, parts=parts)


@dataclass(slots=True)
class Item:
    """One message of a request, where it came from and what the budget did to it."""

    message: ModelMessage
    """The message as it was before any edit."""
    section: str
    source: str
    tool_call_ids: tuple[str, ...] = ()
    """The tool calls the message answers or makes (for an injection: the call that injected it)."""
    edit: Edit = "whole"
    cap: int | None = None
    """For ``cut``: the per-part token cap that was applied."""
    hints: dict[str, str] = field(default_factory=dict)
    """For ``elided``: per tool call id, how to get the result back."""
    original_tokens: int = 0
    tokens: int = 0
    """What the item costs as sent (0 when dropped)."""

    @property
    def is_tool_result(self) -> bool:
        return isinstance(self.message, ModelRequest) and any(
            isinstance(p, ToolReturnPart) for p in self.message.parts
        )


def render_item(item: Item) -> ModelMessage | None:
    """The message sent for ``item`` (``None`` when dropped)."""
    if item.edit == "whole" and item.cap is None:
        return item.message
    if item.edit == "dropped":
        return None
    message = item.message
    if item.edit == "elided":
        message = elide_message(message, item.hints)
    if item.cap is not None:  # an elided message may also have had another part cut
        message = cap_message(message, item.cap)
    return message
