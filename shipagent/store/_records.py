"""The records every store writes, and the typed stores built on a raw record log.

The record shapes are exactly those of ``shipagent.store.logs`` (the file stores, which stay
the format's reference): the conformance suite checks every implementation against them, so a
chat migrated from files to Postgres and back reads the same. The in-memory and Postgres stores
implement only the raw operations of :class:`RawLog`; the typed methods here are shared.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ..results import Sender
from ._browse import ChatInfo, TranscriptPage, chats_by_activity, page_of_records
from ._protocols import CommitReport, Committed, LoadedChat, LogRecord, TurnRecord
from .cards import CARD_CHAT_MESSAGE, CardBoxStore, NewCard, TextContent
from .files import ContextRef
from .files._ref import utc_now_iso
from .files._render import render_history
from .logs import (
    MessageLog,
    agent_context_entry,
    agent_context_summary,
    compaction_record,
    dump_messages,
    load_messages,
    now_iso,
    transcript_records,
    undelivered_record,
)

__all__ = [
    "AgentContextMixin",
    "Fault",
    "MessageLogMixin",
    "RawLog",
    "RecordChatStore",
    "RecordsMessageLog",
    "TranscriptMixin",
    "agent_context_entry",
    "agent_context_summary",
    "cards_hold",
    "commit_parts",
    "compaction_record",
    "history_file",
    "load_records",
    "message_records",
    "records_log",
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


def summarize_window(chat_key: str, entries: list[dict[str, Any]], window: int) -> list[dict[str, Any]]:
    """The agent-context log after its window overflowed: one summary entry + the newest ``window - 1``.

    The summary is :func:`~shipagent.store.logs.agent_context_summary`, the one the file
    store writes, so a chat reads the same from either.
    """
    cut = len(entries) - (window - 1)
    if cut <= 0:
        return entries
    return [agent_context_summary(chat_key, entries[:cut]), *entries[cut:]]


def turn_cards(chat_key: str, request_id: str, user_text: str, output: str) -> list[NewCard]:
    """The output-box cards of a turn, the user's text, then the answer."""
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
    """:class:`~shipagent.store.MessageLogStore` on a raw log."""

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
    """:class:`~shipagent.store.TranscriptStore` on a raw log."""

    async def append_turn(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        output: str,
        *,
        sent: Sequence[str] = (),
        sender: Sender | None = None,
    ) -> int:
        return await self.append_records(
            chat_key, transcript_records(chat_key, request_id, user_text, output, sent, sender=sender)
        )

    async def page_before(self, chat_key: str, before: int | None, limit: int) -> list[LogRecord]:
        stop = (await self.count(chat_key) + 1) if before is None else before
        return await self.records(chat_key, max(1, stop - max(0, limit)), stop) if limit > 0 else []


class AgentContextMixin(RawLog):
    """:class:`~shipagent.store.AgentContextStore` on a raw log."""

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


async def cards_hold(cards: CardBoxStore, chat_key: str, request_id: str) -> bool:
    """Whether the chat's output box ends with the cards of ``request_id``."""
    box = await cards.get_box(await cards.named_box(f"output:{chat_key}"))
    return any(c.metadata.get("request_id") == request_id for c in await cards.get_cards(box.card_ids[-4:]))


def history_file(
    chat_key: str, request_id: str, n: int, removed: list[ModelMessage]
) -> tuple[ContextRef, bytes]:
    """The ``history`` context file that keeps what compaction ``n`` of a turn removed.

    Its id comes from the request id, so a store that is asked to commit the turn again finds
    the file it wrote the first time (the ``.ship/`` store matches by name instead: its ids are
    random, as they have always been).
    """
    text, name, description = render_history(removed)
    data = text.encode("utf-8")
    ref_id = "h" + hashlib.sha256(f"{chat_key}\x1f{request_id}\x1f{n}".encode()).hexdigest()[:6]
    ref = ContextRef(
        id=ref_id,
        kind="history",
        name=name,
        description=description,
        size_bytes=len(data),
        created_at=utc_now_iso(),
        mime="text/markdown",
        eager=True,
        source="compaction",
        path=f"{ref_id}.md",
    )
    return ref, data


def message_records(record: TurnRecord) -> list[dict[str, Any]]:
    """The message-log records of a turn: base compaction, the turn, the compaction it triggered."""
    rid = record.request_id
    out: list[dict[str, Any]] = []
    if record.base_compaction is not None:
        out.append(compaction_record(rid, record.base_compaction, record.base_sources, record.seq))
    out.append(turn_record(rid, record.messages, record.seq))
    if record.compaction is not None:
        out.append(compaction_record(rid, record.compaction, record.compaction_sources, record.next_seq))
    return out


Fault = Callable[[str], None]
"""Test seam of every backend: called with a part's name (``COMMIT_PARTS``) just before it is written."""


class StoreBase(ABC):
    """What every backend has around its one :meth:`commit`: the fault seam, ``commit_turn``, close."""

    cards: CardBoxStore
    fault: Fault | None = None
    """Test seam: called with each part's name just before it is written (on Postgres: inside the
    transaction)."""

    def _fault(self, part: str) -> None:
        if self.fault is not None:
            self.fault(part)

    @abstractmethod
    async def commit(self, record: TurnRecord) -> CommitReport: ...

    async def commit_turn(self, turn: TurnRecord) -> list[str]:
        """:meth:`commit`, for callers that want the output-box cards written (``[]``: none now)."""
        return (await self.commit(turn)).card_ids

    async def close(self) -> None:
        await self.cards.close()


async def commit_parts(stores: Any, record: TurnRecord) -> CommitReport:
    """A turn's commit part after part, on stores built on :class:`RawLog` (memory).

    Not atomic, so it is idempotent per part instead: a part that already holds the turn's
    request id (an earlier attempt stopped half-way, a durable step is replayed) is skipped, so
    the retry completes the turn and every part holds it exactly once. The message log goes
    first and whole (its records in one append): once it holds the turn, the turn is committed.
    """
    key, rid = record.chat_key, record.request_id
    report = CommitReport()
    messages: MessageLogMixin = stores.messages
    if not await messages.holds(key, rid, scan=8, kind="turn"):
        stores._fault("messages")
        await messages.append_records(key, message_records(record))
        report.written.append("messages")

    async def history() -> bool:
        wrote = False
        for n, removed in enumerate(record.removed):
            ref, data = history_file(key, rid, n, removed)
            if removed and ref.id not in {r.id for r in await stores.context_files.list(key)}:
                await stores.context_files.put(key, ref, data)
                wrote = True
        return wrote

    async def transcript() -> bool:
        if not record.spoken or await stores.transcript.holds(key, rid, scan=64):
            return False
        await stores.transcript.append_turn(
            key, rid, record.user_text, record.transcript_answer, sent=record.sent, sender=record.sender
        )
        return True

    async def agent_context() -> bool:
        if not record.spoken or await stores.agent_context.holds(key, rid, scan=8):
            return False
        await stores.agent_context.append(key, rid, record.user_text, record.output, record.tool_calls)
        return True

    async def cards() -> bool:
        if not record.spoken or await cards_hold(stores.cards, key, rid):
            return False
        box = await stores.cards.named_box(f"output:{key}")
        report.card_ids = await stores.cards.append_to_box(
            box, turn_cards(key, rid, record.user_text, record.output)
        )
        return True

    async def ledger() -> bool:  # the ledger is this machine's account: its .ship/ files
        if record.ledger is None or "messages" not in report.written:
            return False
        await anyio.to_thread.run_sync(record.ledger)
        return True

    parts: list[tuple[str, Callable[[], Awaitable[bool]]]] = [
        ("history", history),
        ("transcript", transcript),
        ("agentContext", agent_context),
        ("cards", cards),
        ("ledger", ledger),
    ]
    for name, write in parts:
        try:
            stores._fault(name)
            if await write():
                report.written.append(name)
        except Exception as exc:  # the turn is committed: the parts after it wait for a re-commit
            report.failed[name] = exc
            break
    return report


class RecordsMessageLog(MessageLog):
    """A :class:`MessageLog` over records already read from another store (one chat's)."""

    def __init__(self, paths: ShipPaths, chat_key: str, records: Sequence[dict[str, Any]]) -> None:
        super().__init__(paths)
        self.chat_key = chat_key
        self._records = list(records)

    def records_backward(self, chat_key: str) -> Iterator[Any]:
        return iter(self.records_forward(chat_key)[::-1])

    def records_forward(self, chat_key: str) -> list[Any]:
        return list(self._records) if chat_key == self.chat_key else []


_NOWHERE = ShipPaths(Path("/nonexistent-shipagent-records"))
"""What a :class:`RecordsMessageLog` is given for paths: it never opens a file."""


def records_log(chat_key: str, records: Sequence[dict[str, Any]]) -> RecordsMessageLog:
    """One chat's message log over records read from a store that is not ``.ship/``."""
    return RecordsMessageLog(_NOWHERE, chat_key, records)


def _unnumbered(records: Sequence[dict[str, Any]]) -> bool:
    """Whether records from the last compaction on lack seqs (written before they were numbered)."""
    if records and records[0].get("t") == "compaction" and "sources" not in records[0]:
        return True
    return any(r.get("t") == "turn" and not isinstance(r.get("seq"), int) for r in records)


async def load_records(messages: MessageLogMixin, chat_key: str) -> LoadedChat:
    """The chat's history, each message's source and the next seq, as the message log file gives them.

    Reads from the newest compaction on (the whole log only when older records carry no seqs),
    so a store that is not ``.ship/`` names messages ``history:<seq>`` like the files do, and
    compaction summaries get ids that ``context_expand`` and ``agent.expand`` resolve anywhere.
    """
    start = await messages.last_compaction(chat_key)
    records = [r.data for r in await messages.records(chat_key, max(1, start))]
    if start > 1 and _unnumbered(records):
        records = [r.data for r in await messages.records(chat_key)]
    history: list[ModelMessage] = []
    for record in records:
        if record.get("t") == "compaction":
            history = load_messages(record["history"])
        elif record.get("t") == "turn":
            history.extend(load_messages(record["messages"]))
    sources, next_seq = records_log(chat_key, records).sources(chat_key)
    if len(sources) != len(history):
        sources = [f"history:@{n}" for n in range(len(history))]
    return LoadedChat(history, sources, next_seq)


class RecordChatStore(StoreBase):
    """The :class:`~shipagent.store.ChatStore` read side and small writes on RawLog stores.

    Mixed into the memory and Postgres stores (their ``messages``/``transcript`` are
    :class:`RawLog` s); the files have their own, over the files themselves.
    """

    messages: Any
    transcript: Any

    async def load(self, chat_key: str) -> LoadedChat:
        return await load_records(self.messages, chat_key)

    async def last_committed(self, chat_key: str) -> Committed:
        result: Committed = await self.messages.last_committed(chat_key)
        return result

    async def keep_sent(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        sent: Sequence[str],
        *,
        sender: Sender | None = None,
    ) -> None:
        if sent and not await self.transcript.holds(chat_key, request_id, scan=64):
            await self.transcript.append_turn(chat_key, request_id, user_text, "", sent=sent, sender=sender)

    async def note_undelivered(self, chat_key: str, request_id: str, reason: str) -> None:
        await self.transcript.append_records(chat_key, [undelivered_record(chat_key, request_id, reason)])

    async def clear(self, chat_key: str, request_id: str) -> None:
        next_seq = (await self.load(chat_key)).next_seq  # the seqs go on after a /clear
        await self.messages.append_records(chat_key, [compaction_record(request_id, [], [], next_seq)])

    async def transcript_page(self, chat_key: str, before: int | None, limit: int) -> TranscriptPage:
        return page_of_records(await self.transcript.page_before(chat_key, before, limit))

    async def list_chats(self) -> list[ChatInfo]:
        newest: dict[str, str] = {}  # chat key -> its newest record's time (ISO, so comparable)
        for log in (self.transcript, self.messages):
            for key in await log.chat_keys():
                last = await log.last(key, 1)
                stamp = str(last[0].get("ts", "")) if last else ""
                newest[key] = max(newest.get(key, ""), stamp)
        return chats_by_activity(list(newest.items()))

    async def _log(self, chat_key: str) -> RecordsMessageLog:
        return records_log(chat_key, [r.data for r in await self.messages.records(chat_key)])

    async def expand(self, chat_key: str, summary_id: str) -> list[ModelMessage]:
        return (await self._log(chat_key)).expand(chat_key, summary_id)

    async def find(
        self, chat_key: str, sources: Sequence[str], request_id: str
    ) -> tuple[list[ModelMessage], list[ModelMessage]]:
        return (await self._log(chat_key)).find(chat_key, sources, request_id)
