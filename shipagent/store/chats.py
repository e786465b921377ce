"""Per-chat in-memory history, hydrated from disk once and committed turn by turn.

One :class:`ChatHistories` per agent. Each chat key has its own lock, so turns of one chat never
interleave while different chats run concurrently. It decides how a turn is committed
(:meth:`ChatHistories.plan`: numbering and compaction, before anything is written) and holds the
result in memory once the store has it (:meth:`ChatHistories.committed`); the writes are the
store's (``shipagent.store.ChatStore.commit``). The history in memory stays under its high mark
through compaction (see :class:`~shipagent.window.marks.Marks`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

import anyio
from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ..config import ChatHistoryConfig
from ..window.compaction import CompactionResult, Summarizer, compact, compaction_input
from ..window.injections import strip_injections
from ..window.marks import Marks, history_tokens, window_full
from ._record import CommitReport, TurnRecord
from .logs import MessageLog

__all__ = ["ChatHistories", "ChatWriter", "PlannedTurn", "Reconciler", "Summarizer"]

log = logging.getLogger("shipagent.window")
EARLY_SHARE = 0.25
"""An idle chat is compacted early only when past its low mark by this share of the marks' gap:
a compaction that folds a message or two would cost a summary for almost nothing."""


class ChatWriter(Protocol):
    """What this class asks of the chats' store (a ``shipagent.store.ChatStore``)."""

    async def clear(self, chat_key: str, request_id: str) -> None: ...

    async def commit(self, record: TurnRecord) -> CommitReport: ...


@dataclass
class PlannedTurn:
    """A turn's commit as :meth:`ChatHistories.plan` decided it (see ``stores.TurnRecord``).

    Attributes:
        new: the turn's messages, injections stripped.
        history: the history the turn leaves before any compaction (``base + new``).
        before: the sources of ``base`` (what a base compaction record names).
        sources: the sources of ``history``.
        first_seq: the seq of ``new[0]``.
        base_compaction: the compaction the run needed to fit (``None``: none).
        done: the compaction committing the turn triggers (``None``: within the bound).
    """

    new: list[ModelMessage]
    history: list[ModelMessage]
    before: list[str]
    sources: list[str]
    first_seq: int
    base_compaction: CompactionResult | None
    done: CompactionResult | None

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self.new)

    @property
    def final_sources(self) -> list[str]:
        """The sources of the history the chat has after the turn."""
        return self.done.sources(self.sources) if self.done is not None else self.sources

    @property
    def removed(self) -> list[list[ModelMessage]]:
        """What each compaction of the turn removed (kept as ``history`` context files)."""
        return [c.removed for c in (self.base_compaction, self.done) if c is not None and c.removed]


Reconciler = Callable[[str], object]
"""Called (in a worker thread) when a chat is hydrated: brings the transcript and agent-context
log in line with the message log (see ``history.reconcile``)."""


@dataclass
class _Chat:
    lock: anyio.Lock
    messages: list[ModelMessage] | None = None
    logs_behind: bool = False
    """A log write after a committed turn failed: reconcile before the next turn."""
    sources: list[str] | None = None
    """``history:<seq>`` / ``summary:<id>`` per message of :attr:`messages`."""
    next_seq: int = 0
    pins: int = 0
    """Turns holding or waiting for the lock: a pinned chat is never dropped from memory."""
    used: float = 0.0
    """``time.monotonic()`` of the last use."""


class _ChatLock:
    """What :meth:`ChatHistories.lock` returns: the chat's lock, pinning the chat while used.

    The chat is looked up when the ``async with`` is entered (not when the handle was made) and
    pinned before the first ``await``, so eviction can never hand two turns of one chat two
    different locks.
    """

    def __init__(self, owner: ChatHistories, chat_key: str) -> None:
        self._owner = owner
        self._key = chat_key
        self._held: list[_Chat] = []

    async def __aenter__(self) -> None:
        chat = self._owner._chat(self._key)
        chat.pins += 1  # synchronously with the lookup: from here on it stays resident
        try:
            await chat.lock.acquire()
        except BaseException:
            self._owner._unpin(self._key, chat)
            raise
        self._held.append(chat)

    async def __aexit__(self, *exc: object) -> None:
        chat = self._held.pop()
        chat.lock.release()
        self._owner._unpin(self._key, chat)


class ChatHistories:
    """The in-memory histories of the chats this process has used recently.

    A chat idle for ``idleEvictSeconds``, or beyond the ``maxResidentChats`` most recently used,
    is dropped from memory — its history, lock and bookkeeping — unless a turn holds or awaits
    its lock; its next turn rebuilds it from the tail of its message log. Eviction runs on the
    way in and out of every lookup (no timer), so a process with no traffic keeps what it has.
    """

    def __init__(self, paths: ShipPaths, config: ChatHistoryConfig, marks: Marks | None = None) -> None:
        self.config = config
        self.marks = marks or Marks(config.in_memory_max_messages, config.compact_keep_last_messages)
        """When a commit compacts and what it keeps (ship.json ``context`` via :func:`marks_of`)."""
        self.room: int | None = None
        """The tokens the messages of a request may use, as the last request's budget said
        (:meth:`note_room`); the token marks stay within it."""
        self.window: int | None = None
        """The model's window less the answer's room (``context.budget``), when ship.json says it."""
        self.reported = False
        """Whether the provider reports usage (then its count, not ours, says when the window fills)."""
        self.overflow_room: int | None = None
        """The smallest history (tokens) a request overflowed the model's window with."""
        self.cache_ttl: float = 0
        """Seconds the provider keeps an idle chat's prompt cached (0: never expires); a turn
        after a longer pause compacts early (:meth:`early_compaction`)."""
        self.log = MessageLog(paths)
        self._chats: OrderedDict[str, _Chat] = OrderedDict()  # least recently used first
        self.store: ChatWriter | None = None
        """Where ``reset`` writes (the agent's ChatStore); this class itself writes nothing."""
        self.reconciler: Reconciler | None = None
        self._hydrating = threading.Lock()
        """Run once per chat when it is hydrated from disk, and after a failed log write."""
        self.summarizer: Summarizer | None = None
        """Writes summaries when ``chatHistory.summarizer`` is ``model`` (the agent sets it)."""
        self.clock: Callable[[], float] = time.monotonic
        """Where "now" comes from (tests move it)."""
        self.now: Callable[[], datetime] = lambda: datetime.now(UTC)
        """The wall clock idle time is judged by, against message timestamps (tests move it)."""

    def _chat(self, chat_key: str) -> _Chat:
        now = self.clock()
        chat = self._chats.get(chat_key)
        if chat is None:
            chat = self._chats[chat_key] = _Chat(anyio.Lock(), used=now)
        else:
            chat.used = now
            self._chats.move_to_end(chat_key)
        self._evict(now, keep=chat_key)
        return chat

    def _unpin(self, chat_key: str, chat: _Chat) -> None:
        chat.pins -= 1
        chat.used = self.clock()
        if self._chats.get(chat_key) is chat:
            self._chats.move_to_end(chat_key)
        self._evict(chat.used)

    def _evict(self, now: float, keep: str | None = None) -> None:
        """Drop idle chats and the least recently used beyond the bound; never a pinned one."""
        idle_before = now - self.config.idle_evict_seconds
        excess = len(self._chats) - self.config.max_resident_chats
        victims: list[str] = []
        for key, chat in self._chats.items():  # oldest first; stops at the first recent one
            if excess <= 0 and chat.used > idle_before:
                break
            if chat.pins or key == keep:
                continue
            victims.append(key)
            excess -= 1
        for key in victims:
            del self._chats[key]

    def resident(self) -> list[str]:
        """The chats whose history is in memory, least recently used first (for inspection)."""
        return [key for key, chat in self._chats.items() if chat.messages is not None]

    def lock(self, chat_key: str) -> _ChatLock:
        """The lock that serialises turns of ``chat_key`` (use with ``async with``)."""
        return _ChatLock(self, chat_key)

    def _load(self, chat_key: str) -> tuple[list[ModelMessage], list[str], int]:
        messages = self.log.rebuild(chat_key)
        sources, next_seq = self.log.sources(chat_key)
        if len(sources) != len(messages):  # a record rebuild skipped: name messages by position
            log.warning("chat %r: message seqs do not line up with the history; numbering afresh", chat_key)
            sources = [f"history:@{n}" for n in range(len(messages))]
        return messages, sources, next_seq

    def _hydrate(self, chat: _Chat, chat_key: str) -> None:
        """Load the chat from disk if needed and make the other stores agree with the message log.

        Reconciling costs a few backward reads, and only here: on the first sight of a chat in this
        process (after a restart or a crash) or after a log write failed, never on every turn.
        One at a time (``history()`` may run while a turn's hydration is in a worker thread), so a
        missing entry is never appended twice.
        """
        with self._hydrating:
            if chat.messages is None:
                chat.messages, chat.sources, chat.next_seq = self._load(chat_key)
                chat.logs_behind = True
            if chat.logs_behind and self.reconciler is not None:
                try:
                    self.reconciler(chat_key)
                    chat.logs_behind = False
                except Exception:  # the logs stay behind; the model history is intact: keep going
                    log.exception("chat %r: could not reconcile the transcript and logs", chat_key)
            else:
                chat.logs_behind = False

    def get(self, chat_key: str) -> list[ModelMessage]:
        """The chat's history (a copy), rebuilt from disk when it is not in memory."""
        chat = self._chat(chat_key)
        if chat.messages is None or chat.logs_behind:
            self._hydrate(chat, chat_key)
        assert chat.messages is not None
        return list(chat.messages)

    async def aget(self, chat_key: str) -> list[ModelMessage]:
        chat = self._chat(chat_key)
        if chat.messages is None or chat.logs_behind:
            await anyio.to_thread.run_sync(self._hydrate, chat, chat_key)
        assert chat.messages is not None
        return list(chat.messages)

    def sources(self, chat_key: str) -> list[str]:
        """The source (``history:<seq>`` / ``summary:<id>``) of each message of :meth:`get`."""
        self.get(chat_key)
        return list(self._chat(chat_key).sources or [])

    def clear_memory(self, chat_key: str) -> None:
        """Forget the in-memory copy (the next turn rebuilds it from disk)."""
        self._chat(chat_key).messages = None

    def install(
        self,
        chat_key: str,
        messages: list[ModelMessage],
        sources: list[str] | None = None,
        next_seq: int | None = None,
    ) -> None:
        """Make ``messages`` the chat's in-memory history: another store than ``.ship/`` is the truth.

        A durable worker on Postgres rebuilds a chat from the database and commits it there, so
        the message log file never hydrates it. ``sources``/``next_seq``: the messages' seqs as
        that store numbers them; without them messages are named by position (``history:@n``).
        """
        chat = self._chat(chat_key)
        chat.messages = list(messages)
        if sources is None or len(sources) != len(messages) or next_seq is None:
            sources, next_seq = [f"history:@{n}" for n in range(len(messages))], len(messages)
        chat.sources, chat.next_seq = list(sources), next_seq
        chat.logs_behind = False

    def numbering(self, chat_key: str) -> tuple[list[str], int]:
        """``(source of each message in memory, the seq the next new message gets)``."""
        chat = self._chat(chat_key)
        return list(chat.sources or []), chat.next_seq

    def turn_numbering(
        self,
        chat_key: str,
        base: list[ModelMessage],
        new_count: int,
        base_compaction: CompactionResult | None,
    ) -> tuple[list[str], list[str], int]:
        """How a commit numbers a turn: ``(sources of base, sources of base + new, first new seq)``.

        The Postgres commit numbers with this too, so summaries get the same ids in every store.
        """
        before, first_seq = self.numbering(chat_key)
        if base_compaction is not None:
            before = base_compaction.sources(before)
        if len(before) != len(base):
            before = [f"history:@{n}" for n in range(len(base))]
        return before, [*before, *(f"history:{first_seq + i}" for i in range(new_count))], first_seq

    def note_room(self, tokens: int) -> None:
        """Remember the tokens a request's messages may use (every model request reports it)."""
        self.room = tokens

    def note_overflow(self, history: list[ModelMessage]) -> None:
        """A request with ``history`` did not fit the model's window: that is the most it holds.

        shipagent's token count is an estimate (a chat template adds tokens per message that no
        budget knows of); from now on the marks stay below what overflowed.
        """
        tokens = history_tokens(history)
        self.overflow_room = tokens if self.overflow_room is None else min(tokens, self.overflow_room)

    @property
    def marks_now(self) -> Marks:
        """The marks as they apply now: the configured ones below any history that overflowed
        the model's window and, while the provider reports no usage, within the room our own
        count gives a request's messages."""
        return self.marks.within(None if self.reported else self.room, self.overflow_room)

    def due(self, history: list[ModelMessage]) -> bool:
        """Whether committing ``history`` compacts: it is past a high mark, or its newest request
        filled the model's window (``WINDOW_SHARE``, by the provider's count)."""
        full = window_full(history, self.window) if self.window is not None else None
        if full is not None:
            self.reported = True
            if full:
                return True
        return self.marks_now.over(history)

    def _compact(
        self, history: list[ModelMessage], sources: list[str], body: str | None
    ) -> CompactionResult | None:
        marks = self.marks_now
        return compact(
            history,
            marks.low_messages,
            sources=sources,
            body=body,
            summarizer="model" if body is not None else "extract",
            keep_tokens=marks.low_tokens,
            summary_tokens=marks.summary_tokens,
        )

    async def early_compaction(self, chat_key: str, history: list[ModelMessage]) -> CompactionResult | None:
        """Compact a chat that was idle past the provider's cache TTL, down to the low mark.

        Its cache is cold anyway, so compacting now costs nothing a warm turn would not pay; the
        chat then appends for longer before it meets the high mark on a warm cache. ``None`` when
        the cache never expires (``cache_ttl`` 0), the chat was not idle that long, or the history
        is not past its low mark by :data:`EARLY_SHARE` of the gap. Idle is measured from the
        newest message's timestamp to :attr:`now` (so it holds across restarts).
        """
        if self.cache_ttl <= 0 or not history or not self.marks_now.over_low(history, EARLY_SHARE):
            return None
        last = history[-1].timestamp
        if last is None:
            return None
        if self.now() - last <= timedelta(seconds=self.cache_ttl):
            return None
        sources, _ = self.numbering(chat_key)
        body = await self._model_summary(chat_key, history)
        return self._compact(history, sources if len(sources) == len(history) else [], body)

    async def reset(self, chat_key: str, request_id: str) -> None:
        """Start the chat's model context afresh; everything said stays in the store.

        The store writes it (a compaction record with an empty history), so a restart agrees.
        """
        if self.store is None:
            raise RuntimeError("ChatHistories.reset needs a store (ChatHistories.store)")
        async with self.lock(chat_key):  # waits for a turn of the chat running here
            await self.store.clear(chat_key, request_id)  # the seq counter continues after it
            self.clear_memory(chat_key)  # the next turn reads the cleared chat back, numbered

    async def _model_summary(self, chat_key: str, history: list[ModelMessage]) -> str | None:
        """A model-written summary body for compacting ``history`` (``None``: use the extract).

        Asked only when the history is compacted. Any failure (the model errs, times out, returns
        nothing) falls back to the extract.
        """
        if self.summarizer is None:
            return None
        marks = self.marks_now
        found = compaction_input(history, marks.low_messages, marks.low_tokens)
        if found is None:
            return None
        try:
            body = (await self.summarizer(*found)).strip()
        except Exception as exc:
            log.warning(
                "chat %r: the model summary failed (%s: %s); using the extract",
                chat_key,
                type(exc).__name__,
                exc,
            )
            return None
        return body or None

    async def plan(
        self,
        chat_key: str,
        base: list[ModelMessage],
        new: list[ModelMessage],
        base_compaction: CompactionResult | None = None,
        *,
        summarize: bool = True,
    ) -> PlannedTurn:
        """What committing a turn writes, decided before anything is: numbering and compaction.

        ``base`` is the history the run started from (after ``base_compaction`` when the run
        only fit compacted), ``new`` its messages. When it is :meth:`due` the history is compacted
        (a model-written summary when the agent has a summarizer and ``summarize`` is on; a turn
        committed already does not ask the model again).
        """
        new = strip_injections(new)  # injections live for one run
        history = [*base, *new]
        before, sources, first_seq = self.turn_numbering(chat_key, base, len(new), base_compaction)
        due = self.due(history)  # decided once: the summary and the compaction follow it
        body = await self._model_summary(chat_key, history) if summarize and due else None
        done = self._compact(history, sources, body) if due else None
        return PlannedTurn(new, history, before, sources, first_seq, base_compaction, done)

    async def seed(
        self, chat_key: str, request_id: str, base: list[ModelMessage], new: list[ModelMessage]
    ) -> None:
        """Commit ``new`` as messages nobody said (a delegate's inherited history): no transcript.

        Must be called while holding the chat's lock.
        """
        if self.store is None:
            raise RuntimeError("ChatHistories.seed needs a store (ChatHistories.store)")
        plan = await self.plan(chat_key, base, new)
        record = TurnRecord(
            chat_key,
            request_id,
            "",
            "",
            plan.new,
            compaction=plan.done.history if plan.done is not None else None,
            seq=plan.first_seq,
            compaction_sources=plan.final_sources if plan.done is not None else None,
            removed=plan.removed,
            spoken=False,
        )
        try:
            await self.store.commit(record)
        except BaseException:
            self.clear_memory(chat_key)
            raise
        self.committed(chat_key, plan)

    def over_bound(self, history: list[ModelMessage]) -> bool:
        """Whether ``history`` is compacted when committed (past its high mark)."""
        return self.due(history)

    def committed(self, chat_key: str, plan: PlannedTurn, *, behind: bool = False) -> None:
        """The store holds ``plan``'s turn: it becomes the chat's history in memory.

        ``behind``: a part after the message log failed; the logs are reconciled with the
        message log before the chat's next turn.
        """
        chat = self._chat(chat_key)
        chat.messages = plan.done.history if plan.done is not None else plan.history
        chat.sources, chat.next_seq = plan.final_sources, plan.next_seq
        chat.logs_behind = behind
