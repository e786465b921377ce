"""The store protocols: what a turn reads and writes, whatever holds it (files, memory, Postgres).

Shaped like openai-agents' ``Session`` protocol: a few async methods per store, so the runtime
never knows whether a chat lives in ``.ship/`` JSONL files on one machine or in a Postgres
database shared by workers on many. Every per-chat log is a sequence of JSON records numbered
``seq`` = 1, 2, … per chat key (in the files the line number; in Postgres the ``(chat_key, seq)``
key), and the records themselves are the same dicts in every implementation, so ``shipagent
migrate`` can move them and write back byte-identical JSONL.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic_ai.messages import ModelMessage

from ..results import Sender
from ._browse import ChatInfo, TranscriptPage
from ._record import COMMIT_PARTS, CommitReport, Committed, LoadedChat, LogRecord, TurnRecord, TurnWrite
from .cards import CardBoxStore
from .files import ContextRef, Page, Tail

__all__ = [
    "COMMIT_PARTS",
    "AgentContextStore",
    "ChatStore",
    "CommitReport",
    "Committed",
    "ContextFileStore",
    "LoadedChat",
    "LogRecord",
    "MessageLogStore",
    "RecordLog",
    "Stores",
    "TranscriptStore",
    "TurnRecord",
    "TurnWrite",
]


@runtime_checkable
class RecordLog(Protocol):
    """The raw per-chat log every typed store below is: numbered JSON records, append-only."""

    async def append_records(self, chat_key: str, records: Sequence[dict[str, Any]]) -> int:
        """Append records as they are (a migration, a replay); returns the last seq (0 if none)."""
        ...

    async def count(self, chat_key: str) -> int:
        """How many records the chat has (its last seq)."""
        ...

    async def records(
        self, chat_key: str, start: int = 1, stop: int | None = None
    ) -> builtins.list[LogRecord]:
        """Records with ``start <= seq < stop`` (``stop=None``: to the end), oldest first."""
        ...

    async def last(self, chat_key: str, count: int, *, skip: int = 0) -> builtins.list[dict[str, Any]]:
        """The newest ``count`` records after skipping the newest ``skip``, oldest first."""
        ...

    async def chat_keys(self) -> builtins.list[str]:
        """Every chat key with at least one record (sorted)."""
        ...

    async def holds(self, chat_key: str, request_id: str, *, scan: int, kind: str | None = None) -> bool:
        """Whether one of the newest ``scan`` records carries ``request_id`` (and ``t == kind``)."""
        ...


@runtime_checkable
class MessageLogStore(RecordLog, Protocol):
    """Model messages per chat: ``turn`` records and ``compaction`` records (see ``history.logs``)."""

    async def append_turn(self, chat_key: str, request_id: str, messages: builtins.list[ModelMessage]) -> int:
        """Append the messages one committed turn added; returns the record's seq."""
        ...

    async def append_compaction(
        self, chat_key: str, request_id: str, history: builtins.list[ModelMessage]
    ) -> int:
        """Append the whole history right after a compaction; returns the record's seq."""
        ...

    async def rebuild(self, chat_key: str) -> builtins.list[ModelMessage]:
        """The history after the last committed turn: the last compaction plus the turns after it."""
        ...

    async def last_committed(self, chat_key: str) -> Committed:
        """The last seq and its request id (``Committed(0, None)`` for a new chat)."""
        ...


@runtime_checkable
class TranscriptStore(RecordLog, Protocol):
    """What the user and the assistant said, one record per utterance."""

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
        """The user (with ``sender`` when given), the ``chat_send`` texts, the answer, in one append;
        returns the last seq."""
        ...

    async def page_before(self, chat_key: str, before: int | None, limit: int) -> builtins.list[LogRecord]:
        """Up to ``limit`` records with ``seq < before`` (``None``: the newest), oldest first."""
        ...


@runtime_checkable
class AgentContextStore(RecordLog, Protocol):
    """One execution summary per run; past ``window`` entries the oldest are merged into one."""

    window: int

    async def append(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        output: str,
        tool_calls: builtins.list[dict[str, Any]],
    ) -> None:
        """Append a run's summary, merging older entries when the window overflows."""
        ...


@runtime_checkable
class ContextFileStore(Protocol):
    """The context files of every chat: an index of refs plus the files' bytes.

    The index is a log too (a later ref with the same id wins), so a store can be copied
    record by record; :meth:`put` writes the bytes and appends the ref together.
    """

    async def put(self, chat_key: str, ref: ContextRef, content: bytes) -> ContextRef:
        """Store ``content`` under ``ref`` (its ``size_bytes`` is set from the content)."""
        ...

    async def put_raw(self, chat_key: str, record: dict[str, Any], content: bytes | None) -> None:
        """Append an index record as it is, with its bytes when given (what a migration does).

        An index may name one id several times (a rewritten catalog): only the newest version's
        bytes still exist, so a copy passes ``content`` with the last record of each id only.
        """
        ...

    async def list(self, chat_key: str) -> builtins.list[ContextRef]:
        """The chat's current refs, in the order they were last written."""
        ...

    async def index(self, chat_key: str) -> builtins.list[dict[str, Any]]:
        """Every index record ever appended, oldest first (what a migration copies)."""
        ...

    async def get(self, chat_key: str, ref_id: str) -> ContextRef:
        """The ref ``ref_id``; :class:`~shipagent.errors.NotFoundError` when the chat has none."""
        ...

    async def content(self, chat_key: str, ref_id: str) -> bytes:
        """The whole file behind ``ref_id``."""
        ...

    async def read(self, chat_key: str, ref_id: str, offset: int = 0, limit: int = 8192) -> Page:
        """Bytes ``[offset, offset + limit)`` on UTF-8 character boundaries."""
        ...

    async def tail(self, chat_key: str, ref_id: str, lines: int = 200, *, max_bytes: int = 65536) -> Tail:
        """The last ``lines`` lines."""
        ...

    async def text(self, chat_key: str, ref_id: str) -> str:
        """The file decoded (bad UTF-8 replaced), for grep."""
        ...

    async def chat_keys(self) -> builtins.list[str]:
        """Every chat key with an index."""
        ...


@runtime_checkable
class ChatStore(Protocol):
    """Where a project's chats live: the one store protocol the core writes and reads through.

    ``load`` gives a turn its history, ``commit`` writes ONE :class:`TurnRecord` to every part
    (message log, history files, transcript, agent-context log, ledger, output-box cards),
    idempotent by request id, and the rest is the read side. Backends: :class:`FileStores`
    (``.ship/``, the default), :class:`MemoryStores` (tests), :class:`PgStores` (a durable
    cluster). Each has one commit.
    """

    @property
    def context_files(self) -> ContextFileStore:
        """The chats' context files (history files of compactions among them)."""
        ...

    @property
    def cards(self) -> CardBoxStore:
        """Cards and boxes (a chat's output box gets a turn's cards)."""
        ...

    async def load(self, chat_key: str) -> LoadedChat:
        """The chat's history, numbered; an unknown chat is empty."""
        ...

    async def commit(self, record: TurnRecord) -> CommitReport:
        """Write ``record``'s parts the store does not hold yet.

        Raises when the message log could not take the turn (nothing of it is committed then,
        and a later commit of the same record starts over); a later part that fails is in
        :attr:`CommitReport.failed`.
        """
        ...

    async def keep_sent(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        sent: Sequence[str],
        *,
        sender: Sender | None = None,
    ) -> None:
        """Transcript lines of a turn that did not commit: the user, then what ``chat_send`` said.

        Once per request id.
        """
        ...

    async def note_undelivered(self, chat_key: str, request_id: str, reason: str) -> None:
        """Record in the transcript that turn ``request_id``'s answer never reached the chat.

        One ``{"role": "system", "event": "undelivered", "text": reason}`` line per call (a host
        calls it once, when its delivery gave up): what was lost stays visible after a restart.
        """
        ...

    async def clear(self, chat_key: str, request_id: str) -> None:
        """Start the chat's model context afresh (an empty compaction); everything said stays."""
        ...

    async def last_committed(self, chat_key: str) -> Committed:
        """Where the chat's message log stands (another worker may have committed since)."""
        ...

    async def transcript_page(self, chat_key: str, before: int | None, limit: int) -> TranscriptPage:
        """Up to ``limit`` transcript entries, oldest first, ending before cursor ``before``
        (``None``: the newest), and the cursor of the page before them (``None``: none).

        A cursor is the store's own (a byte offset in the files, a record seq in a database):
        pass back only one it returned. A page costs the page, not the whole transcript.
        """
        ...

    async def list_chats(self) -> builtins.list[ChatInfo]:
        """Every chat the store holds, most recently written first (``GET /v1/chats``)."""
        ...

    async def expand(self, chat_key: str, summary_id: str) -> builtins.list[ModelMessage]:
        """The messages compaction summary ``summary_id`` replaced; ``KeyError`` if unknown."""
        ...

    async def find(
        self, chat_key: str, sources: Sequence[str], request_id: str
    ) -> tuple[builtins.list[ModelMessage], builtins.list[ModelMessage]]:
        """``(messages named by sources, messages of turn request_id)``: what reconstructing a
        ledger record reads. ``KeyError`` naming what is missing."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class Stores(ChatStore, Protocol):
    """A :class:`ChatStore` whose logs can also be read and written one by one.

    The turn goes through :meth:`ChatStore.commit` only; ``shipagent migrate`` copies a project's
    chats log by log (every record as it is, so the copy is byte-identical), and the stores'
    conformance tests check each log. Every backend is both.
    """

    messages: MessageLogStore
    transcript: TranscriptStore
    agent_context: AgentContextStore
