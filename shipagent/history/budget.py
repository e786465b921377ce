"""Bounding what one model request carries by tokens (tiktoken o200k_base), not only by count.

A message-count bound alone lets one 2 MB tool output blow the context window. Before each request
:func:`fit_to_budget` (pure; the caller passes what it sends):

1. cuts any single part larger than a quarter of the budget to head + tail with a visible marker;
2. drops the oldest prior-history messages (never orphaning a tool result) until the rest fits,
   and says so in one system line;
3. if the run's own messages still do not fit, keeps halving the per-part cap, applying it to
   the oldest messages first and stopping as soon as everything fits.

The chat's stored history is never changed: only the list sent to the model is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .compaction import MARKER, is_summary
from .tokens import count_tokens, cut_text, token_upper_bound

__all__ = ["fit_to_budget", "message_tokens"]

_PER_MESSAGE_OVERHEAD = 4
_MIN_PART_CAP = 64

Part = ModelRequestPart | ModelResponsePart


def _part_text(part: Part) -> str:
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


def _cuttable(part: Part) -> bool:
    return isinstance(part, UserPromptPart | SystemPromptPart | TextPart | ToolReturnPart) or (
        isinstance(part, RetryPromptPart) and isinstance(part.content, str)
    )


def _with_content(part: Part, text: str) -> Part:
    """``part`` with its text replaced (a new part: stored messages are never edited in place)."""
    if isinstance(part, UserPromptPart):
        return dataclasses.replace(part, content=text)
    if isinstance(part, SystemPromptPart):
        return dataclasses.replace(part, content=text)
    if isinstance(part, TextPart):
        return dataclasses.replace(part, content=text)
    if isinstance(part, ToolReturnPart):
        # typed subclasses (tool search, capability loads) are small; only plain results get cut
        return dataclasses.replace(cast("ToolReturnPart[Any]", part), content=text)
    if isinstance(part, RetryPromptPart):
        return dataclasses.replace(part, content=text)
    return part


def message_tokens(message: ModelMessage) -> int:
    """Tokens a message costs: its parts' text plus a small per-message overhead."""
    return _PER_MESSAGE_OVERHEAD + sum(count_tokens(_part_text(p)) for p in message.parts)


def _upper(message: ModelMessage) -> int:
    return _PER_MESSAGE_OVERHEAD + sum(token_upper_bound(_part_text(p)) for p in message.parts)


def _cap_message(message: ModelMessage, cap: int) -> ModelMessage:
    parts: list[Part] = []
    changed = False
    for part in message.parts:
        text = _part_text(part)
        if _cuttable(part) and token_upper_bound(text) > cap and count_tokens(text) > cap:
            part = _with_content(part, cut_text(text, cap))
            changed = True
        parts.append(part)
    if not changed:
        return message
    return dataclasses.replace(message, parts=parts)  # type: ignore[arg-type]


def _total(messages: Sequence[ModelMessage]) -> int:
    return sum(message_tokens(m) for m in messages)


def fit_to_budget(
    prior: Sequence[ModelMessage], current: Sequence[ModelMessage], budget: int
) -> tuple[list[ModelMessage], list[ModelMessage]]:
    """Return ``(prior, current)`` cut and trimmed so that together they fit ``budget`` tokens.

    ``prior`` is the chat's history before this run (a leading summary is kept while anything
    is); ``current`` is the run's own messages starting with the user's request, which are
    never dropped, only cut.
    """
    everything = [*prior, *current]
    cap = max(budget // 4, _MIN_PART_CAP)
    if sum(_upper(m) for m in everything) <= budget:
        return list(prior), list(current)  # fast path: no tokenising at all

    prior_out = [_cap_message(m, cap) for m in prior]
    current_out = [_cap_message(m, cap) for m in current]
    if _total(prior_out) + _total(current_out) > budget:
        head = [m for m in prior_out[:1] if is_summary(m)]
        body = prior_out[len(head) :]
        room = budget - _total(current_out) - _total(head) - 40
        sizes = [message_tokens(m) for m in body]
        kept_tokens, start = 0, len(body)
        while start > 0 and kept_tokens + sizes[start - 1] <= room:
            start -= 1
            kept_tokens += sizes[start]
        # Never start on a tool result whose call was dropped: drop the orphans as well.
        while start < len(body) and _orphan_start(body, start):
            start += 1
        if start > 0:
            note = ModelRequest(
                parts=[
                    SystemPromptPart(
                        f"[shipagent left out {start} older messages of this chat from this request "
                        "to stay within the token budget; they are still on disk — call "
                        "chat_load_history to see them.]"
                    )
                ],
                metadata={MARKER: {"kind": "budget-note"}},
            )
            if room <= 0:
                head = []
            prior_out = [*head, note, *body[start:]]
    # Still over: shrink parts oldest first, stopping as soon as it fits, so the newest tool
    # result (the page the model just asked for) is the last thing to lose text.
    messages = [*prior_out, *current_out]
    sizes = [message_tokens(m) for m in messages]
    while sum(sizes) > budget and cap > _MIN_PART_CAP:
        cap //= 2
        for index, message in enumerate(messages):
            capped = _cap_message(message, cap)
            if capped is not message:
                messages[index] = capped
                sizes[index] = message_tokens(capped)
                if sum(sizes) <= budget:
                    break
    return messages[: len(prior_out)], messages[len(prior_out) :]


def _orphan_start(body: Sequence[ModelMessage], start: int) -> bool:
    """Whether ``body[start]`` answers a tool call made before ``start``."""
    first = body[start]
    if not isinstance(first, ModelRequest):
        return False
    returns = {p.tool_call_id for p in first.parts if isinstance(p, ToolReturnPart | RetryPromptPart)}
    if not returns:
        return False
    calls = {
        p.tool_call_id
        for m in body[:start]
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    }
    return bool(returns & calls)
