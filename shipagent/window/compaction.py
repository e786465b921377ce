"""Compaction of a chat's in-memory history: pure functions, no I/O.

When a chat's history grows past its high mark the older messages are folded into one summary
message and the newest are kept, down to the low mark (see :mod:`.marks`). Far-apart marks keep
compactions rare: between two, every turn only appends to what the provider has cached. Two rules
the simpler compaction schemes break and we keep:

* a tool call and its result are never separated — a cut that would orphan a tool return moves
  earlier, so the kept tail always starts where the model can make sense of it;
* the summary is rebuilt from the previous summary plus the removed messages, so repeated
  compactions keep an (ever more condensed) trace of the whole conversation.

What is removed from memory stays on disk (message log, transcript, history context files).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .marks import SUMMARY_TOKENS, history_tokens
from .sections import message_facts
from .tokens import count_tokens

__all__ = [
    "CompactionResult",
    "SummarySpan",
    "compact",
    "compaction_input",
    "history_tokens",
    "is_summary",
    "message_text",
    "safe_cut_index",
    "summary_compactions",
    "summary_id",
    "summary_message",
]

MARKER = "shipagent"
_LINE_CHARS = 300
_HEADER = (
    "[Summary of the earlier conversation: {count} older messages were compacted. Their full text "
    "is still on disk — call chat_load_history (or search the history context files) when you "
    "need details.]"
)
_COVERS = "[It covers {turns} turns, {first} to {last} (UTC).]"
_EXPAND = (
    "[Summary {id}: context_expand(summary_id={id!r}) returns the {count} messages it replaced, verbatim.]"
)


def _kind(message: ModelMessage) -> str | None:
    meta = message.metadata if isinstance(message, ModelRequest | ModelResponse) else None
    if not (isinstance(meta, dict) and isinstance(meta.get(MARKER), dict)) and message.parts:
        # pydantic-ai merges consecutive requests before each model request and drops the
        # message-level metadata of the merged one; a part's metadata survives the merge.
        first = message.parts[0]
        meta = first.metadata if isinstance(first, SystemPromptPart) else None
    if isinstance(meta, dict) and isinstance(meta.get(MARKER), dict):
        kind = meta[MARKER].get("kind")
        return kind if isinstance(kind, str) else None
    return None


def is_summary(message: ModelMessage) -> bool:
    """Whether ``message`` is a compaction summary made by :func:`compact`."""
    return _kind(message) == "summary"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return " ".join(c if isinstance(c, str) else f"[{type(c).__name__}]" for c in content)
    return str(content)


def message_text(message: ModelMessage) -> list[tuple[str, str]]:
    """The readable (role, text) lines of a message, one per part that carries text."""
    lines: list[tuple[str, str]] = []
    for part in message.parts:
        if isinstance(part, UserPromptPart):
            lines.append(("user", _content_text(part.content)))
        elif isinstance(part, SystemPromptPart):
            lines.append(("system", part.content))
        elif isinstance(part, TextPart):
            lines.append(("assistant", part.content))
        elif isinstance(part, ToolCallPart):
            args = part.args if isinstance(part.args, str) else json.dumps(part.args, ensure_ascii=False)
            lines.append((f"tool call {part.tool_name}", args or "{}"))
        elif isinstance(part, ToolReturnPart):
            lines.append((f"tool result {part.tool_name}", part.model_response_str()))
        elif isinstance(part, RetryPromptPart):
            lines.append((f"tool retry {part.tool_name or ''}".rstrip(), part.model_response()))
    return lines


def _call_ids(message: ModelMessage) -> set[str]:
    if isinstance(message, ModelResponse):
        return {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
    return set()


def _return_ids(message: ModelMessage) -> set[str]:
    if isinstance(message, ModelRequest):
        return {
            p.tool_call_id
            for p in message.parts
            if isinstance(p, ToolReturnPart | RetryPromptPart) and p.tool_call_id
        }
    return set()


def _said(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts)


def safe_cut_index(messages: Sequence[ModelMessage], keep: int, keep_tokens: int | None = None) -> int:
    """Index where the kept tail of ``messages`` starts when keeping about ``keep`` messages.

    With ``keep_tokens`` the tail also stays within that many tokens, but always keeps the newest
    turn (from the last user message on). The cut then moves earlier (the tail grows) until no message in the tail answers a
    tool call that lies before the cut, so a call and its result always stay together.
    """
    cut = max(len(messages) - keep, 0)
    if keep_tokens is not None:
        newest = next((n for n in range(len(messages) - 1, -1, -1) if _said(messages[n])), len(messages) - 1)
        tail = history_tokens(messages[cut:])
        while cut < newest and tail > keep_tokens:
            tail -= message_facts(messages[cut])[0]
            cut += 1
    while cut > 0:
        answered_later = set().union(*(_return_ids(m) for m in messages[cut:]))
        called_before = set().union(*(_call_ids(m) for m in messages[:cut]))
        if not answered_later & called_before:
            break
        cut -= 1
    return cut


Summarizer = Callable[[str, list[ModelMessage]], Awaitable[str]]
"""``(previous summary body, messages to fold) -> summary body``: a model-written summary."""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """The outcome of :func:`compact`."""

    history: list[ModelMessage]
    """``[summary, …kept]``: the new in-memory history."""
    removed: list[ModelMessage]
    """The messages folded into the summary (the previous summary excluded)."""
    summary: ModelRequest
    span: SummarySpan | None = None
    """The summary's id and the seqs it replaced (when the caller passed sources)."""
    summarizer: str = "extract"
    """Which summarizer wrote the summary: ``extract`` or ``model``."""

    def sources(self, before: Sequence[str]) -> list[str]:
        """The sources of :attr:`history`, given those of the messages compacted."""
        head = [f"summary:{self.span.id}" if self.span else "summary:"]
        return head + list(before[len(before) - (len(self.history) - 1) :]) if len(self.history) > 1 else head


def _summary_info(message: ModelMessage) -> dict[str, Any]:
    meta = message.metadata if isinstance(message, ModelRequest) else None
    info = meta.get(MARKER, {}) if isinstance(meta, dict) else {}
    return info if isinstance(info, dict) else {}


def _summary_body(message: ModelMessage) -> tuple[int, str]:
    info = _summary_info(message)
    return int(info.get("compactedMessages", 0)), str(info.get("body", ""))


@dataclass(frozen=True, slots=True)
class Coverage:
    """What a summary covers: how many of the user's turns, from when to when (UTC)."""

    turns: int
    first: str
    last: str

    @classmethod
    def of(cls, previous: ModelMessage | None, removed: Sequence[ModelMessage]) -> Coverage | None:
        """The coverage of a summary folding ``removed`` into ``previous`` (a summary or ``None``)."""
        info = _summary_info(previous) if previous is not None else {}
        turns = int(info.get("turns", 0)) + sum(1 for m in removed if _said(m))
        times = [t for m in removed if (t := _when(m)) is not None]
        first = str(info.get("from") or (min(times) if times else ""))
        last = max(times) if times else str(info.get("to") or "")
        return cls(turns, first, last) if first and last else None


def _when(message: ModelMessage) -> str | None:
    stamp = message.timestamp if isinstance(message, ModelRequest | ModelResponse) else None
    return stamp.strftime("%Y-%m-%d %H:%M") if isinstance(stamp, datetime) else None


def _trim(body: str, max_tokens: int) -> str:
    """``body`` within ``max_tokens``: the oldest lines go first (they are the most condensed)."""
    lines = body.split("\n")
    sizes = [count_tokens(line) + 1 for line in lines]
    total, start = sum(sizes), 0
    while total > max_tokens and start < len(lines) - 1:
        total -= sizes[start]
        start += 1
    if start == 0:
        return body
    kept = "\n".join(lines[start:])
    return "…" + kept if count_tokens(kept) < max_tokens else "…" + kept[: max_tokens * 3]


def summary_message(
    count: int,
    body: str,
    *,
    span: SummarySpan | None = None,
    summarizer: str = "extract",
    compactions: int = 1,
    coverage: Coverage | None = None,
) -> ModelRequest:
    """The summary message itself: a leading system part, marked in metadata.

    With a ``span`` the summary has an id, records the seqs it replaced and its parent, and tells
    the model that ``context_expand`` gives those messages back. ``compactions`` counts the
    compactions folded into it (its parent's count + 1), so how often a chat was compacted is
    read off its newest summary, not counted over the whole message log. ``coverage`` says
    which turns and dates the summary covers.
    """
    header = _HEADER.format(count=count)
    if coverage is not None:
        header += "\n" + _COVERS.format(turns=coverage.turns, first=coverage.first, last=coverage.last)
    meta: dict[str, Any] = {
        "kind": "summary",
        "compactedMessages": count,
        "body": body,
        "summarizer": summarizer,
        "compactions": compactions,
    }
    if coverage is not None:
        meta.update(turns=coverage.turns, **{"from": coverage.first, "to": coverage.last})
    if span is not None:
        header += "\n" + _EXPAND.format(id=span.id, count=span.to_seq - span.from_seq + 1)
    text = header + ("\n" + body if body else "")
    if span is not None:
        meta.update(id=span.id, fromSeq=span.from_seq, toSeq=span.to_seq, parent=span.parent)
    return ModelRequest(
        # The part is marked too, so the summary is still recognised in a merged request.
        parts=[SystemPromptPart(text, metadata={MARKER: {"kind": "summary", "summarizer": summarizer}})],
        metadata={MARKER: meta},
    )


@dataclass(frozen=True, slots=True)
class SummarySpan:
    """Which message seqs a summary replaced, and the summary it folded in (if any)."""

    id: str
    from_seq: int
    to_seq: int
    parent: str | None = None


def summary_compactions(message: ModelMessage) -> int:
    """How many compactions summary ``message`` folds in (0 for a message that is not a summary).

    A summary written before the count was kept says at least 1, 2 when it has a parent.
    """
    meta = message.metadata if isinstance(message, ModelRequest) else None
    info = meta.get(MARKER) if isinstance(meta, dict) else None
    if not isinstance(info, dict) or info.get("kind") != "summary":
        return 0
    count = info.get("compactions")
    if isinstance(count, int) and count > 0:
        return count
    return 2 if info.get("parent") else 1


def summary_id(message: ModelMessage) -> str | None:
    """The id of a compaction summary (``None`` for other messages and summaries without one)."""
    meta = message.metadata if isinstance(message, ModelRequest) else None
    info = meta.get(MARKER) if isinstance(meta, dict) else None
    found = info.get("id") if isinstance(info, dict) else None
    return found if isinstance(found, str) else None


def _span(removed_sources: Sequence[str], parent: str | None) -> SummarySpan | None:
    seqs: list[int] = []
    for source in removed_sources:
        kind, _, value = source.partition(":")
        if kind != "history" or not value.isdigit():
            return None  # positions we cannot name: no expandable span
        seqs.append(int(value))
    if not seqs:
        return None
    lo, hi = min(seqs), max(seqs)
    return SummarySpan(f"S{lo}-{hi}", lo, hi, parent)


def compaction_input(
    messages: Sequence[ModelMessage], keep: int, keep_tokens: int | None = None
) -> tuple[str, list[ModelMessage]] | None:
    """``(previous summary body, messages a compaction would fold)``, or ``None`` if nothing would be.

    What a model-written summary is made from: the same pair-safe cut :func:`compact` makes.
    """
    start = 1 if messages and is_summary(messages[0]) else 0
    cut = safe_cut_index(list(messages[start:]), keep, keep_tokens)
    if cut == 0:
        return None
    previous = _summary_body(messages[0])[1] if start else ""
    return previous, list(messages[start : start + cut])


def compact(
    messages: Sequence[ModelMessage],
    keep: int,
    *,
    sources: Sequence[str] | None = None,
    body: str | None = None,
    summarizer: str = "extract",
    keep_tokens: int | None = None,
    summary_tokens: int = SUMMARY_TOKENS,
) -> CompactionResult | None:
    """Fold all but about the last ``keep`` messages (and ``keep_tokens`` tokens) into one summary.

    ``sources`` (``history:<seq>`` per message, as :class:`~.chats.ChatHistories` tracks them)
    gives the summary an id and the seq range it replaced. The summary's body stays within
    ``summary_tokens``. Returns ``None`` when there is nothing to fold (the safe cut lands at the
    start).
    """
    previous_count, previous_body = 0, ""
    start = 0
    if messages and is_summary(messages[0]):
        previous_count, previous_body = _summary_body(messages[0])
        start = 1
    body_msgs = list(messages[start:])
    cut = safe_cut_index(body_msgs, keep, keep_tokens)
    if cut == 0:
        return None
    removed, kept = body_msgs[:cut], body_msgs[cut:]
    if body is None:  # the mechanical extract; a model-written body comes in from the caller
        summarizer = "extract"
        lines = [previous_body] if previous_body else []
        for message in removed:
            lines.extend(f"{role}: {_clip(text, _LINE_CHARS)}" for role, text in message_text(message))
        body = "\n".join(lines)
    body = _trim(body, summary_tokens)
    span = None
    if sources is not None and len(sources) == len(messages):
        span = _span(sources[start : start + cut], summary_id(messages[0]) if start else None)
    summary = summary_message(
        previous_count + len(removed),
        body,
        span=span,
        summarizer=summarizer,
        compactions=(summary_compactions(messages[0]) if start else 0) + 1,
        coverage=Coverage.of(messages[0] if start else None, removed),
    )
    return CompactionResult(
        history=[summary, *kept], removed=removed, summary=summary, span=span, summarizer=summarizer
    )
