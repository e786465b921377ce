"""The ``.ship/`` backend of :class:`~shipagent.store.ChatStore`: its one commit and its read side.

The commit is one worker-thread hop that writes the parts of a :class:`TurnRecord` in order —
the message log (base compaction, the turn, the compaction it triggered), the ``history``
context files of the compactions, the transcript, the agent-context log, the output-box cards,
the ledger — each through the class that has always written it, so the bytes on disk are
unchanged. Files cannot be written in one transaction, so each part first asks its file whether
it already holds the request id (the newest few lines, compared as bytes: no parse); a commit
that crashed half-way, or a durable step replayed after a kill, writes only what is missing. A
request id the turn minted itself (``TurnRecord.fresh``) cannot be held yet: nothing is asked.

Once the message log holds the turn the turn is committed: a later part that fails stops the
parts after it (they are rebuilt from the message log before the chat's next turn, see
``history.reconcile``) and is reported, never raised.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from pydantic_ai.messages import ModelMessage

from .. import jsonl
from .._cache import BoundedCache
from ..chatkeys import ShipPaths
from ..results import Sender
from ._browse import ChatInfo, TranscriptPage, list_file_chats, read_transcript_page
from ._protocols import CommitReport, Committed, LoadedChat, TranscriptStore, TurnRecord
from ._records import StoreBase, cards_hold, turn_cards
from .files._render import render_history

if TYPE_CHECKING:
    from ._record import CachedChats
    from .cards import CardBoxStore, SqliteCardBoxStore
    from .files import ContextFiles
    from .logs import AgentContextLog, MessageLog, Transcript

__all__ = ["FileChatStore", "raw_holds"]

log = logging.getLogger("shipagent.store")
_REMEMBERED_BOXES = 4096
"""Output-box ids remembered (one lookup per chat while it is in use)."""


def raw_holds(path: Path, request_id: str, scan: int, kind: str | None = None) -> set[str]:
    """The kinds (``t``, or ``""``) of the newest ``scan`` lines of ``path`` that carry ``request_id``.

    Compared as bytes: every store writes ``"requestId":"…"`` with the same compact encoder, and
    a text that quotes it is escaped (``\\"``), so it cannot match.
    """
    marker = b'"requestId":' + json.dumps(request_id, ensure_ascii=False).encode("utf-8")
    found: set[str] = set()
    for index, line in enumerate(jsonl.iter_lines_backward(path)):
        if index >= scan:
            break
        if marker in line:
            t = line[6 : line.find(b'"', 6)].decode("utf-8", "replace") if line.startswith(b'{"t":"') else ""
            if kind is None or t == kind:
                found.add(t)
    return found


class FileChatStore(StoreBase):
    """Mixed into :class:`~shipagent.store.FileStores`: the ChatStore methods over ``.ship/``."""

    paths: ShipPaths
    message_log: MessageLog
    transcript_log: Transcript
    agent_context_log: AgentContextLog
    files: ContextFiles
    cards: SqliteCardBoxStore
    ledger_path: Callable[[str], Path] | None
    transcript: TranscriptStore

    def _init_chat_store(self) -> None:
        self._boxes: BoundedCache[str, str] = BoundedCache(_REMEMBERED_BOXES)
        self.ledger_path = None

    # -- the commit ------------------------------------------------------------------------------

    async def commit(self, record: TurnRecord) -> CommitReport:
        """Write the parts of ``record`` the files do not hold yet, in one worker-thread hop.

        The chat's first turn in this process looks its output box up first and writes its
        cards after the hop (the card store's own async path); every later turn writes them in
        the hop.
        """
        box = self._boxes.get(record.chat_key) if record.spoken else None
        report = await anyio.to_thread.run_sync(self.commit_sync, record, box)
        if box is None and record.spoken and not report.failed:
            await self._first_cards(record, report)
        return report

    async def _first_cards(self, record: TurnRecord, report: CommitReport) -> None:
        key, rid = record.chat_key, record.request_id
        try:
            box = await self.cards.named_box(f"output:{key}")
            self._boxes[key] = box
            if await cards_hold(self.cards, key, rid):
                return
            report.card_ids = await self.cards.append_to_box(
                box, turn_cards(key, rid, record.user_text, record.output)
            )
            report.written.append("cards")
        except Exception as exc:  # the cards are an account of the turn, never a reason to redo it
            log.warning("chat %r: could not write turn %s to its output box: %s", key, rid, exc)

    def commit_sync(self, record: TurnRecord, box: str | None = None) -> CommitReport:
        """:meth:`commit` for a caller already in a worker thread (``box``: the output box's id)."""
        key, rid = record.chat_key, record.request_id
        report = CommitReport()
        held = set() if record.fresh else raw_holds(self.message_log.path(key), rid, 8)
        if "turn" not in held:
            self._fault("messages")
            if record.base_compaction is not None and "compaction" not in held:
                self.message_log.append_compaction(
                    key, rid, record.base_compaction, sources=record.base_sources, next_seq=record.seq
                )
            self.message_log.append_turn(key, rid, record.messages, seq=record.seq)
            if record.compaction is not None:
                self.message_log.append_compaction(
                    key, rid, record.compaction, sources=record.compaction_sources, next_seq=record.next_seq
                )
            report.written.append("messages")
        parts: list[tuple[str, Callable[[], bool]]] = [
            ("history", lambda: self._history_files(record)),
            ("transcript", lambda: self._transcript(record)),
            ("agentContext", lambda: self._agent_context(record)),
            ("cards", lambda: self._cards(record, box, report)),
            ("ledger", lambda: self._ledger(record)),
        ]
        for name, write in parts:
            try:
                self._fault(name)
                if write():
                    report.written.append(name)
            except Exception as exc:  # the turn is committed: the parts after it wait for a re-commit
                report.failed[name] = exc
                break
        return report

    def _history_files(self, record: TurnRecord) -> bool:
        wrote = False
        for removed in record.removed:
            if not removed:
                continue
            _, name, description = render_history(removed)
            newest = [] if record.fresh else self.files.list(record.chat_key, kind="history", limit=4)
            if any(r.description == description and r.name == name for r in newest):
                continue  # kept by an earlier attempt of this turn
            self.files.add_history_messages(record.chat_key, removed)
            wrote = True
        return wrote

    def _transcript(self, record: TurnRecord) -> bool:
        key, rid = record.chat_key, record.request_id
        if not record.spoken or (not record.fresh and raw_holds(self.transcript_log.path(key), rid, 64)):
            return False
        self.transcript_log.append_turn(
            key, rid, record.user_text, record.transcript_answer, sent=record.sent, sender=record.sender
        )
        return True

    def _agent_context(self, record: TurnRecord) -> bool:
        key, rid = record.chat_key, record.request_id
        if not record.spoken or (not record.fresh and raw_holds(self.agent_context_log.path(key), rid, 8)):
            return False
        self.agent_context_log.append(key, rid, record.user_text, record.output, record.tool_calls)
        return True

    def _cards(self, record: TurnRecord, box: str | None, report: CommitReport) -> bool:
        if box is None:
            return False
        try:
            if not record.fresh and self.cards.box_holds_sync(box, "request_id", record.request_id, last=4):
                return False
            cards = turn_cards(record.chat_key, record.request_id, record.user_text, record.output)
            report.card_ids = self.cards.append_to_box_sync(box, cards)
        except Exception as exc:  # the cards are an account of the turn, never a reason to redo it
            log.warning(
                "chat %r: could not write turn %s to its output box: %s",
                record.chat_key,
                record.request_id,
                exc,
            )
            self._boxes.pop(record.chat_key, None)
            return False
        return True

    def _ledger(self, record: TurnRecord) -> bool:
        if record.ledger is None:
            return False
        if (
            not record.fresh
            and self.ledger_path is not None
            and raw_holds(self.ledger_path(record.chat_key), record.request_id, 4)
        ):
            return False
        record.ledger()  # logs its own failure: the ledger is an account of the turn
        return True

    # -- the sync side: what ``ShipAgent.history``/``expand``/``reconstruct`` and the tools use --

    def history_sync(self, chat_key: str, chats: CachedChats) -> builtins.list[ModelMessage]:
        """The chat's history: this process's copy, hydrated from the files when it has none."""
        return chats.get(chat_key)

    def message_log_sync(self, chat_key: str) -> MessageLog:
        return self.message_log

    async def history_async(self, chat_key: str, chats: CachedChats) -> builtins.list[ModelMessage]:
        """:meth:`history_sync` for code on an event loop (hydrating reads the files in a thread)."""
        return await chats.aget(chat_key)

    async def message_log_async(self, chat_key: str) -> MessageLog:
        return self.message_log

    def sync_context_files(self) -> ContextFiles:
        return self.files

    def turn_card_store(self) -> CardBoxStore | None:
        """``None``: handover opens ``.ship/cardbox.sqlite3`` itself (and this store writes to it)."""
        return None

    # -- the read side and small writes ----------------------------------------------------------

    def load_sync(self, chat_key: str) -> LoadedChat:
        """:meth:`load` for a caller in a worker thread (or with no event loop)."""
        messages = self.message_log.rebuild(chat_key)
        sources, next_seq = self.message_log.sources(chat_key)
        if len(sources) != len(messages):  # a record rebuild skipped: name messages by position
            log.warning("chat %r: message seqs do not line up with the history; numbering afresh", chat_key)
            sources = [f"history:@{n}" for n in range(len(messages))]
        return LoadedChat(messages, sources, next_seq)

    async def load(self, chat_key: str) -> LoadedChat:
        return await anyio.to_thread.run_sync(self.load_sync, chat_key)

    async def last_committed(self, chat_key: str) -> Committed:
        found: Committed = await self.messages.last_committed(chat_key)  # type: ignore[attr-defined]
        return found

    async def keep_sent(
        self,
        chat_key: str,
        request_id: str,
        user_text: str,
        sent: Sequence[str],
        *,
        sender: Sender | None = None,
    ) -> None:
        if not sent:
            return
        path = self.transcript_log.path(chat_key)

        def write() -> None:
            if not raw_holds(path, request_id, 64):
                self.transcript_log.append_turn(chat_key, request_id, user_text, "", sent=sent, sender=sender)

        await anyio.to_thread.run_sync(write)

    async def note_undelivered(self, chat_key: str, request_id: str, reason: str) -> None:
        await anyio.to_thread.run_sync(self.transcript_log.append_undelivered, chat_key, request_id, reason)

    def clear_sync(self, chat_key: str, request_id: str, next_seq: int) -> None:
        """An empty compaction record numbered from ``next_seq`` (what the chat's memory knows)."""
        self.message_log.append_compaction(chat_key, request_id, [], sources=[], next_seq=next_seq)

    async def clear(self, chat_key: str, request_id: str) -> None:
        def write() -> None:
            self.clear_sync(chat_key, request_id, self.message_log.sources(chat_key)[1])

        await anyio.to_thread.run_sync(write)

    async def transcript_page(self, chat_key: str, before: int | None, limit: int) -> TranscriptPage:
        path = self.transcript_log.path(chat_key)  # the cursor is a byte offset: read backwards from it
        return await anyio.to_thread.run_sync(read_transcript_page, path, limit, before)

    async def list_chats(self) -> builtins.list[ChatInfo]:
        return await anyio.to_thread.run_sync(list_file_chats, self.paths)

    async def expand(self, chat_key: str, summary_id: str) -> builtins.list[ModelMessage]:
        return await anyio.to_thread.run_sync(self.message_log.expand, chat_key, summary_id)

    async def find(
        self, chat_key: str, sources: Sequence[str], request_id: str
    ) -> tuple[builtins.list[ModelMessage], builtins.list[ModelMessage]]:
        return await anyio.to_thread.run_sync(self.message_log.find, chat_key, sources, request_id)
