"""The in-memory stores: the fake every test can use, and the reference for the protocol's meaning.

Records go through a JSON round trip on the way in, as they do in the files and in Postgres, so
a test on the fake sees what it would see on disk (a value JSON cannot hold fails here too).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage

from ._context import ContextBase, sha256
from ._protocols import CommitReport, LogRecord, TurnRecord
from ._record import CachedChats
from ._records import (
    AgentContextMixin,
    MessageLogMixin,
    RawLog,
    RecordChatStore,
    TranscriptMixin,
    commit_parts,
    records_log,
)
from .cards import CardBoxStore, SqliteCardBoxStore
from .logs import MessageLog

__all__ = ["MemoryStores"]


def _copy(record: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(record, ensure_ascii=False, allow_nan=False))
    return copied


class _MemoryLog(RawLog):
    def __init__(self) -> None:
        self._chats: dict[str, list[dict[str, Any]]] = {}

    async def append_records(self, chat_key: str, records: Sequence[dict[str, Any]]) -> int:
        copies = [_copy(r) for r in records]  # all or nothing: copy every record first
        log = self._chats.setdefault(chat_key, [])
        log.extend(copies)
        return len(log)

    async def records(self, chat_key: str, start: int = 1, stop: int | None = None) -> list[LogRecord]:
        log = self._chats.get(chat_key, [])
        end = len(log) + 1 if stop is None else min(stop, len(log) + 1)
        return [LogRecord(seq, _copy(log[seq - 1])) for seq in range(max(1, start), end)]

    async def count(self, chat_key: str) -> int:
        return len(self._chats.get(chat_key, []))

    async def chat_keys(self) -> list[str]:
        return sorted(k for k, v in self._chats.items() if v)

    async def replace_all(self, chat_key: str, records: Sequence[dict[str, Any]]) -> None:
        self._chats[chat_key] = [_copy(r) for r in records]


class MemoryMessageLog(MessageLogMixin, _MemoryLog):
    """Model-message log in memory."""


class MemoryTranscript(TranscriptMixin, _MemoryLog):
    """Transcript in memory."""


class MemoryAgentContext(AgentContextMixin, _MemoryLog):
    """Agent-context log in memory."""

    def __init__(self, *, window: int = 200) -> None:
        super().__init__()
        self.window = window


class MemoryContextFiles(ContextBase):
    """Context files in memory (read through a private temp-dir cache)."""

    def __init__(self, cache_dir: Path | None = None) -> None:
        super().__init__(cache_dir)
        self._index: dict[str, list[dict[str, Any]]] = {}
        self._content: dict[tuple[str, str], tuple[str, bytes]] = {}

    async def _append(self, chat_key: str, record: dict[str, Any], content: bytes | None) -> None:
        if content is not None:
            self._content[(chat_key, str(record["id"]))] = (sha256(content), content)
        self._index.setdefault(chat_key, []).append(_copy(record))

    async def index(self, chat_key: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self._index.get(chat_key, [])]

    async def _digest(self, chat_key: str, ref_id: str) -> str | None:
        found = self._content.get((chat_key, ref_id))
        return found[0] if found else None

    async def _bytes(self, chat_key: str, ref_id: str) -> bytes:
        found = self._content.get((chat_key, ref_id))
        return found[1] if found else b""

    async def chat_keys(self) -> list[str]:
        return sorted(k for k, v in self._index.items() if v)


class MemoryStores(RecordChatStore):
    """Every store in memory: for tests and for trying the runtime without a disk."""

    def __init__(self, *, window: int = 200, project_id: str = "default") -> None:
        self.messages = MemoryMessageLog()
        self.transcript = MemoryTranscript()
        self.agent_context = MemoryAgentContext(window=window)
        self.context_files = MemoryContextFiles()
        self.cards: CardBoxStore = SqliteCardBoxStore(Path(":memory:"), project_id=project_id)

    async def commit(self, record: TurnRecord) -> CommitReport:
        """Part after part, each skipped when it holds the request id (see ``commit_parts``)."""
        return await commit_parts(self, record)

    def history_sync(self, chat_key: str, chats: CachedChats) -> list[ModelMessage]:
        """The chat's history: the agent's copy, hydrated when it has none (as on files)."""
        return chats.get(chat_key)

    def message_log_sync(self, chat_key: str) -> MessageLog:
        """The chat's message log as it is now (memory needs no event loop to read)."""
        return records_log(chat_key, [_copy(r) for r in self.messages._chats.get(chat_key, [])])
