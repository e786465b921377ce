"""The records every store writes, and the typed stores built on a raw record log.

The record shapes are exactly those of ``shipagent.history.stores`` (the file stores, which stay
the format's reference): the conformance suite checks every implementation against them, so a
chat migrated from files to Postgres and back reads the same. The in-memory and Postgres stores
implement only the raw operations of :class:`RawLog`; the typed methods here are shared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage

from ..handover import CARD_CHAT_MESSAGE, CardBoxStore, NewCard, TextContent
from ..history.stores import (
    agent_context_entry,
    agent_context_summary,
    dump_messages,
    load_messages,
    now_iso,
)
from ._protocols import Committed, LogRecord, TurnWrite

__all__ = [
    "AgentContextMixin",
    "MessageLogMixin",
    "RawLog",
    "TranscriptMixin",
    "agent_context_entry",
    "agent_context_summary",
    "commit_in_order",
    "compaction_record",
    "summarize_window",
    "transcript_records",
    "turn_cards",
    "turn_record",
]


def turn_record(request_id: str, messages: list[ModelMessage], seq: int | None = None) -> dict[str, Any]:
    """A ``turn`` record; ``seq`` numbers its first message (as ``MessageLog.append_turn`` writes it)."""
    record: dict[str, Any] = {"t": "turn", "ts": now_iso(), "requestId": request_id}
    if seq is not None:
        record["seq"] = seq
    record["messages"] = dump_messages(messages)
    return record


def compaction_record(
    request_id: str,
    history: list[ModelMessage],
    sources: Sequence[str] | None = None,
    next_seq: int | None = None,
) -> dict[str, Any]:
    """A ``compaction`` record; with each message's source and the seq counter when numbered."""
    record: dict[str, Any] = {"t": "compaction", "ts": now_iso(), "requestId": request_id}
    record["history"] = dump_messages(history)
    if sources is not None and next_seq is not None:
        record["sources"], record["nextSeq"] = list(sources), next_seq
    return record


def transcript_records(
    chat_key: str, request_id: str, user_text: str, output: str, sent: Sequence[str]
) -> list[dict[str, Any]]:
    base = {"v": 1, "ts": now_iso(), "chatKey": chat_key, "requestId": request_id}
    lines = [{**base, "role": "user", "text": user_text}]
    lines.extend({**base, "role": "assistant", "text": t, "via": "tool"} for t in sent)
    if output:
        lines.append({**base, "role": "assistant", "text": output})
    return lines


def summarize_window(chat_key: str, entries: list[dict[str, Any]], window: int) -> list[dict[str, Any]]:
    """The agent-context log after its window overflowed: one summary entry + the newest ``window - 1``.

    The summary is :func:`~shipagent.history.stores.agent_context_summary`, the one the file
    store writes, so a chat reads the same from either.
    """
    cut = len(entries) - (window - 1)
    if cut <= 0:
        return entries
    return [agent_context_summary(chat_key, entries[:cut]), *entries[cut:]]


def turn_cards(chat_key: str, request_id: str, user_text: str, output: str) -> list[NewCard]:
    """The output-box cards of a turn, as ``HandoverRuntime.record_turn`` writes them."""
    return [
        NewCard(CARD_CHAT_MESSAGE, TextContent(text), chat_key, {"role": role, "request_id": request_id})
        for role, text in (("user", user_text), ("assistant", output))
        if text.strip()
    ]


class RawLog(ABC):
    """A per-chat log of numbered records; subclasses store them, this class gives them meaning.

    Every typed store (messages, transcript, agent context) is a :class:`RawLog` with a few
    methods on top, so the in-memory fake and Postgres share one definition of each store.
    """

    window: int = 200

    @abstractmethod
    async def append_records(self, chat_key: str, records: Sequence[dict[str, Any]]) -> int: ...

    @abstractmethod
    async def records(self, chat_key: str, start: int = 1, stop: int | None = None) -> list[LogRecord]: ...

    @abstractmethod
    async def count(self, chat_key: str) -> int: ...

    @abstractmethod
    async def chat_keys(self) -> list[str]: ...

    @abstractmethod
    async def replace_all(self, chat_key: str, records: Sequence[dict[str, Any]]) -> None:
        """Replace the chat's records (renumbered from 1) in one step: the agent-context window."""

    async def holds(self, chat_key: str, request_id: str, *, scan: int, kind: str | None = None) -> bool:
        """Whether one of the newest ``scan`` records has ``request_id`` (and ``t == kind``, if given).

        Per-chat order means nothing of a chat is committed after its running turn, so a turn that
        was written is among the newest few records.
        """
        return any(
            r.get("requestId") == request_id and (kind is None or r.get("t") == kind)
            for r in await self.last(chat_key, scan)
        )

    async def last(self, chat_key: str, count: int, *, skip: int = 0) -> list[dict[str, Any]]:
        if count <= 0:
            return []
        total = await self.count(chat_key)
        stop = total - max(0, skip) + 1
        return [r.data for r in await self.records(chat_key, max(1, stop - count), stop)]


class MessageLogMixin(RawLog):
    """:class:`~shipagent.stores.MessageLogStore` on a raw log."""

    async def append_turn(self, chat_key: str, request_id: str, messages: list[ModelMessage]) -> int:
        return await self.append_records(chat_key, [turn_record(request_id, messages)])

    async def append_compaction(self, chat_key: str, request_id: str, history: list[ModelMessage]) -> int:
        return await self.append_records(chat_key, [compaction_record(request_id, history)])

    async def last_compaction(self, chat_key: str) -> int:
        """The seq of the newest compaction record (0 when there is none)."""
        for record in reversed(await self.records(chat_key)):
            if record.data.get("t") == "compaction":
                return record.seq
        return 0

    async def rebuild(self, chat_key: str) -> list[ModelMessage]:
        history: list[ModelMessage] = []
        for record in await self.records(chat_key, max(1, await self.last_compaction(chat_key))):
            if record.data.get("t") == "compaction":
                history = load_messages(record.data["history"])
            elif record.data.get("t") == "turn":
                history.extend(load_messages(record.data["messages"]))
        return history

    async def last_committed(self, chat_key: str) -> Committed:
        count = await self.count(chat_key)
        if not count:
            return Committed(0, None)
        (record,) = await self.records(chat_key, count, count + 1)
        request_id = record.data.get("requestId")
        return Committed(count, request_id if isinstance(request_id, str) else None)


class TranscriptMixin(RawLog):
    """:class:`~shipagent.stores.TranscriptStore` on a raw log."""

    async def append_turn(
        self, chat_key: str, request_id: str, user_text: str, output: str, *, sent: Sequence[str] = ()
    ) -> int:
        return await self.append_records(
            chat_key, transcript_records(chat_key, request_id, user_text, output, sent)
        )

    async def page_before(self, chat_key: str, before: int | None, limit: int) -> list[LogRecord]:
        stop = (await self.count(chat_key) + 1) if before is None else before
        return await self.records(chat_key, max(1, stop - max(0, limit)), stop) if limit > 0 else []


class AgentContextMixin(RawLog):
    """:class:`~shipagent.stores.AgentContextStore` on a raw log."""

    async def append(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        output: str,
        tool_calls: list[dict[str, Any]],
    ) -> None:
        entry = agent_context_entry(chat_key, request_id, user_text, output, tool_calls)
        if await self.append_records(chat_key, [entry]) > self.window:
            entries = [r.data for r in await self.records(chat_key)]
            await self.replace_all(chat_key, summarize_window(chat_key, entries, self.window))


async def _cards_hold(cards: CardBoxStore, chat_key: str, request_id: str) -> bool:
    box = await cards.get_box(await cards.named_box(f"output:{chat_key}"))
    return any(c.metadata.get("request_id") == request_id for c in await cards.get_cards(box.card_ids[-4:]))


async def commit_in_order(
    messages: MessageLogMixin,
    transcript: TranscriptMixin,
    agent_context: AgentContextMixin,
    cards: CardBoxStore,
    turn: TurnWrite,
) -> list[str]:
    """A turn's commit store after store, as the file runtime has always written it.

    Not atomic, so it is idempotent per store instead: a store that already holds the turn's
    request id (an earlier attempt crashed half-way, a durable step is replayed) is skipped, so
    the retry completes the turn and every store holds it exactly once. Returns the ids of the
    output-box cards written now (``[]`` when they were already there).
    """
    key, rid = turn.chat_key, turn.request_id
    if not await messages.holds(key, rid, scan=8, kind="turn"):
        if turn.base_compaction is not None:
            await messages.append_compaction(key, rid, turn.base_compaction)
        await messages.append_turn(key, rid, turn.messages)
        if turn.compaction is not None:
            await messages.append_compaction(key, rid, turn.compaction)
    if not await transcript.holds(key, rid, scan=64):
        await transcript.append_turn(key, rid, turn.user_text, turn.transcript_answer, sent=turn.sent)
    if not await agent_context.holds(key, rid, scan=8):
        await agent_context.append(key, rid, turn.user_text, turn.output, turn.tool_calls)
    if await _cards_hold(cards, key, rid):
        return []
    box = await cards.named_box(f"output:{key}")
    return await cards.append_to_box(box, turn_cards(key, rid, turn.user_text, turn.output))
