"""``chat_send`` and ``chat_load_history``: speaking to the chat and looking back at it.

The transcript (``.ship/chats/<key>/history.jsonl``) is what the user saw. It outlives compaction of
the model's in-memory history, so ``chat_load_history`` can bring back turns the model no longer
has — as one assistant message placed right before the current user message, where earlier
conversation naturally sits, without rewriting what the user just said.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from pydantic import Field
from pydantic_ai import RunContext

from .._patterns import InvalidPatternError, UnsupportedPatternError, compile_pattern
from ..jsonl import iter_objects_backward
from ._common import MAX_BLOCK_CHARS, failure, fit_block
from ._deps import RecordTail, TurnDeps, deps_of
from .execution import ToolExecutionContext, fingerprint_of

__all__ = [
    "SEARCH_MAX_CHARS",
    "HistoryWindow",
    "RecordTail",
    "chat_load_history",
    "chat_send",
    "read_store_window",
    "read_transcript_window",
]

_ROLES = ("user", "assistant")


async def chat_send(run: RunContext[TurnDeps], text: str) -> dict[str, Any]:
    """Send a message to the user in this chat. Use it at most once per user message.

    Args:
        text: the message, written for the user (conclusions, not raw tool output).
    """
    ctx = deps_of(run).tool
    if not text.strip():
        return failure("text is empty; nothing was sent")
    delivered = "output"
    if ctx.channel is not None:
        try:
            sent = ctx.channel.send_text(ctx.chat_key, text)
            if inspect.isawaitable(sent):
                await sent
        except Exception as exc:  # a broken channel is the model's problem to report, not a crash
            return failure(f"the channel could not deliver the message: {type(exc).__name__}: {exc}")
        delivered = "channel"
    # Without a channel the run appends these to AgentResult.output. The turn writes them to the
    # transcript (``via: "tool"``) after the user's line, so the transcript reads in the order things
    # were said; a run that fails later still records what was already delivered.
    ctx.sent_texts.append(text)
    return {"success": True, "delivered": delivered}


SEARCH_MAX_CHARS = 32 << 20
"""A keyword search reads at most this much message text, newest first, then stops and says so."""


@dataclass(frozen=True, slots=True)
class HistoryWindow:
    """What :func:`read_transcript_window` found: entries oldest first, and how they were matched.

    Attributes:
        entries: ``{role, text, ts}`` dicts, oldest first.
        mode: ``recent`` or ``search``.
        regex: False when the keyword was not a valid regex and was matched as a plain substring.
        searched: how many messages a search looked at.
        exhausted: True when a search stopped at :data:`SEARCH_MAX_CHARS` before the oldest message.
    """

    entries: list[dict[str, Any]]
    mode: str
    regex: bool = True
    searched: int = 0
    exhausted: bool = False


def _matcher(keyword: str | None) -> tuple[Callable[[str], bool], bool]:
    """The keyword as a test on a message's text, and whether it is used as a regex.

    RE2, not Python's ``re``: a hostile pattern (``(a+)+$``) runs in linear time instead of
    freezing the process. Not a regex at all (``C++``, ``(foo``): matched as a plain substring.

    Raises:
        UnsupportedPatternError: a backreference or lookaround, which a substring would never match.
    """
    if keyword is None:
        return (lambda _text: True), True
    try:
        pattern = compile_pattern(keyword, case_sensitive=False, possessive=False)
    except UnsupportedPatternError:
        raise
    except InvalidPatternError:
        needle = keyword.casefold()
        return (lambda text: needle in text.casefold()), False
    return pattern.search_text, True


class _Picker:
    """Picks the window from transcript records fed newest first; says when it is full.

    A search stops once it has read :data:`SEARCH_MAX_CHARS` of text, so its cost is bounded
    whatever the transcript's size.
    """

    def __init__(self, count: int, offset: int, keyword: str | None) -> None:
        self.matches, self.is_regex = _matcher(keyword)
        self.count, self.skip, self.keyword = count, offset, keyword
        self.picked: list[dict[str, Any]] = []
        self.searched = 0
        self.budget = SEARCH_MAX_CHARS
        self.exhausted = False

    def feed(self, obj: object) -> bool:
        """Consider one record; True once the window is filled or the search budget is spent."""
        if not isinstance(obj, dict) or obj.get("role") not in _ROLES:
            return False
        text = obj.get("text")
        if not isinstance(text, str):
            return False
        if self.keyword is not None:
            if self.budget < len(text):
                self.exhausted = True
                return True
            self.budget -= len(text)
            self.searched += 1
            if not self.matches(text):
                return False
        if self.skip:
            self.skip -= 1
            return False
        self.picked.append({"role": obj["role"], "text": text, "ts": obj.get("ts")})
        return len(self.picked) >= self.count

    def feed_page(self, page: list[dict[str, Any]]) -> bool:
        """Feed a page of records given oldest first; True once the picker wants no more."""
        return any(self.feed(obj) for obj in reversed(page))

    def window(self) -> HistoryWindow:
        mode = "search" if self.keyword is not None else "recent"
        return HistoryWindow(list(reversed(self.picked)), mode, self.is_regex, self.searched, self.exhausted)


def read_transcript_window(
    path: Path, *, count: int, offset: int = 0, keyword: str | None = None
) -> HistoryWindow:
    """The window ``[len-offset-count, len-offset)`` of the user/assistant entries of a transcript.

    The file is read backwards in blocks and reading stops once the window is filled, so the cost
    follows ``offset + count`` (or how far back the matches are, up to :data:`SEARCH_MAX_CHARS`),
    not the file size. With ``keyword`` only entries matching it count: a case-insensitive RE2
    regex, or a plain substring when the keyword is not a valid regex (models write ``C++`` and
    ``(foo``). Blocking: call it from a worker thread.

    Raises:
        UnsupportedPatternError: the keyword uses a backreference or lookaround.
    """
    picker = _Picker(count, offset, keyword)
    for obj in iter_objects_backward(path):  # a torn line from a crash is skipped, the rest is good
        if picker.feed(obj):
            break
    return picker.window()


_PAGE = 200


async def read_store_window(
    store: RecordTail, chat_key: str, *, count: int, offset: int = 0, keyword: str | None = None
) -> HistoryWindow:
    """:func:`read_transcript_window` over a transcript store, read newest first a page at a time.

    The keyword is compiled and each page matched in a worker thread: the event loop serves other
    chats meanwhile.
    """
    picker = await anyio.to_thread.run_sync(_Picker, count, offset, keyword)
    skip = 0
    while True:
        page = await store.last(chat_key, _PAGE, skip=skip)
        if await anyio.to_thread.run_sync(picker.feed_page, page) or len(page) < _PAGE:
            return picker.window()
        skip += len(page)


def _history_block(
    ctx: ToolExecutionContext, window: HistoryWindow, count: int, offset: int, keyword: str | None
) -> tuple[str, int]:
    header = (
        f"[Earlier conversation loaded from the transcript] chat: {ctx.chat_key} | mode: {window.mode} "
        f"| count: {len(window.entries)} (asked {count}) | offset: {offset}"
    )
    if keyword is not None:
        how = "regex" if window.regex else "substring (not a valid regex)"
        header += f" | keyword: {keyword} ({how})"
    lines = [f"{entry['role']}: {entry['text']}" for entry in window.entries]
    return fit_block(header, lines, MAX_BLOCK_CHARS)


async def chat_load_history(
    run: RunContext[TurnDeps],
    count: Annotated[int, Field(ge=1, le=200)] = 20,
    offset: Annotated[int, Field(ge=0, le=2000)] = 0,
    keyword: Annotated[str | None, Field(min_length=1, max_length=200)] = None,
) -> dict[str, Any]:
    """Load earlier messages of this chat, when the user refers to conversation you cannot see.

    The messages are added to your context before the user's current message.

    Args:
        count: how many user/assistant messages to load (the newest ones before `offset`).
        offset: how many of the newest messages to skip, to page further back.
        keyword: only messages matching this case-insensitive regex in RE2 syntax (or plain text,
            when it is not a regex). Backreferences and lookaround are not supported: search for
            a literal word of the message instead.
    """
    deps = deps_of(run)
    ctx, store = deps.tool, deps.stores.transcript
    try:
        if store is not None:  # the chat lives in a shared store (Postgres), not in this machine's files
            window = await read_store_window(store, ctx.chat_key, count=count, offset=offset, keyword=keyword)
        else:
            path = ctx.paths.transcript(ctx.chat_key)
            window = await anyio.to_thread.run_sync(
                lambda: read_transcript_window(path, count=count, offset=offset, keyword=keyword)
            )
    except UnsupportedPatternError as exc:
        return failure(f"keyword: {exc}")
    base: dict[str, Any] = {"mode": window.mode}
    if keyword is not None:
        base["keyword"] = keyword
    stopped = (
        f"the search stopped after the newest {window.searched} messages (it reads at most "
        f"{SEARCH_MAX_CHARS:,} characters of text); older messages were not searched"
    )
    if not window.entries:
        note = f"No messages match '{keyword}'." if keyword is not None else "No earlier messages found."
        if window.exhausted:
            note = f"{note} Note: {stopped}."
        return {"success": True, "inserted": 0, "note": note, "picked": 0, **base}
    block, shown = _history_block(ctx, window, count, offset, keyword)
    fingerprint = (
        f"chat_history:{ctx.chat_key}:{keyword or 'recent'}:{count}:{offset}:{fingerprint_of(block)}"
    )
    result = ctx.inject_assistant_message_once(block, fingerprint=fingerprint)
    out: dict[str, Any] = {"success": True, "inserted": int(result.inserted), **base}
    if result.reason is not None:
        out["reason"] = result.reason
    out["picked"] = len(window.entries)
    notes = []
    if shown < len(window.entries):
        notes.append(
            f"{len(window.entries) - shown} older message(s) left out to stay within the block limit"
        )
    if window.exhausted:
        notes.append(stopped)
    if notes:
        out["note"] = "; ".join(notes)
    return out
