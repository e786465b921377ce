"""Per-chat in-memory history, hydrated from disk once and committed turn by turn.

One :class:`ChatHistories` per agent. Each chat key has its own lock, so turns of one chat never
interleave while different chats run concurrently. A committed turn costs a few appends; the
history in memory stays within ``inMemoryMaxMessages`` through compaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import anyio
from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ..config import ChatHistoryConfig
from .compaction import CompactionResult, compact, compaction_input
from .injections import strip_injections
from .stores import MessageLog

__all__ = ["ChatHistories", "CompactionHook", "Reconciler", "Summarizer"]

log = logging.getLogger("shipagent.history")

CompactionHook = Callable[[str, CompactionResult], None]
"""Called (in a worker thread) with the chat key and what a compaction removed."""

Summarizer = Callable[[str, list[ModelMessage]], Awaitable[str]]
"""``(previous summary body, messages to fold) -> summary body``: a model-written summary."""


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

    def __init__(self, paths: ShipPaths, config: ChatHistoryConfig) -> None:
        self.config = config
        self.log = MessageLog(paths)
        self._chats: OrderedDict[str, _Chat] = OrderedDict()  # least recently used first
        self.compaction_hooks: list[CompactionHook] = []
        self.reconciler: Reconciler | None = None
        self._hydrating = threading.Lock()
        """Run once per chat when it is hydrated from disk, and after a failed log write."""
        self.summarizer: Summarizer | None = None
        """Writes summaries when ``chatHistory.summarizer`` is ``model`` (the agent sets it)."""
        self.clock: Callable[[], float] = time.monotonic
        """Where "now" comes from (tests move it)."""

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

    def compaction_of(
        self, history: list[ModelMessage], sources: list[str], body: str | None
    ) -> CompactionResult | None:
        """The compaction committing ``history`` triggers; ``None`` while it is within the bound."""
        if len(history) <= self.config.in_memory_max_messages:
            return None
        return compact(
            history,
            self.config.compact_keep_last_messages,
            sources=sources,
            body=body,
            summarizer="model" if body is not None else "extract",
        )

    async def reset(self, chat_key: str, request_id: str) -> None:
        """Start the chat's model context afresh; everything said stays on disk.

        Written as a compaction record with an empty history, so a restart agrees.
        """
        async with self.lock(chat_key):  # pins the chat: the lookups below find this one
            await self.aget(chat_key)  # the seq counter continues after a /clear
            chat = self._chat(chat_key)
            write = partial(
                self.log.append_compaction, chat_key, request_id, [], sources=[], next_seq=chat.next_seq
            )
            await anyio.to_thread.run_sync(write)
            chat.messages, chat.sources = [], []

    def _run_hooks(self, chat_key: str, result: CompactionResult) -> None:
        for hook in self.compaction_hooks:
            try:
                hook(chat_key, result)
            except Exception:  # a hook must never cost the user the turn
                log.exception("compaction hook %r failed for chat %r", hook, chat_key)

    async def _model_summary(self, chat_key: str, history: list[ModelMessage]) -> str | None:
        """A model-written summary body when this commit will compact, else ``None``.

        Any failure (the model errs, times out, returns nothing) falls back to the extract.
        """
        if self.summarizer is None or len(history) <= self.config.in_memory_max_messages:
            return None
        found = compaction_input(history, self.config.compact_keep_last_messages)
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

    async def commit(
        self,
        chat_key: str,
        request_id: str,
        base: list[ModelMessage],
        new: list[ModelMessage],
        *,
        base_compaction: CompactionResult | None = None,
        also: Callable[[], None] | None = None,
    ) -> CompactionResult | None:
        """Persist a turn: ``base`` (the history the run started from) + ``new`` messages.

        ``base_compaction`` is set when the run only succeeded on a compacted history (context
        overflow retry); it is persisted first. Returns the compaction this commit triggered, if
        any. ``also`` runs in the same worker-thread hop (the transcript and agent-context
        writes), so a turn pays for one thread round trip, not three. Must be called while
        holding the chat's lock.

        Once the turn record is in the message log the turn is committed: a failure of ``also``
        (disk full, a damaged log) is logged and repaired from the message log before the chat's
        next turn, never reported as a failed turn (a caller would retry it and say it twice).
        """
        chat = self._chat(chat_key)
        new = strip_injections(new)  # injections live for one run
        history = [*base, *new]
        result: CompactionResult | None = None
        behind = False
        before, sources, first_seq = self.turn_numbering(chat_key, base, len(new), base_compaction)
        next_seq = first_seq + len(new)
        final_sources = sources
        body = await self._model_summary(chat_key, history)

        def write() -> CompactionResult | None:
            nonlocal final_sources, behind
            if base_compaction is not None:
                self.log.append_compaction(chat_key, request_id, base, sources=before, next_seq=first_seq)
                self._run_hooks(chat_key, base_compaction)
            self.log.append_turn(chat_key, request_id, new, seq=first_seq)
            if also is not None:
                try:
                    also()
                except Exception:
                    behind = True
                    log.exception(
                        "chat %r: turn %s is saved, but writing its transcript/logs failed; "
                        "they are rebuilt from the message log before the next turn",
                        chat_key,
                        request_id,
                    )
            done = self.compaction_of(history, sources, body)
            if done is not None:
                self._run_hooks(chat_key, done)
                final_sources = done.sources(sources)
                self.log.append_compaction(
                    chat_key, request_id, done.history, sources=final_sources, next_seq=next_seq
                )
            return done

        try:
            result = await anyio.to_thread.run_sync(write)
        except BaseException:
            chat.messages = None  # part of the turn may be on disk: the next turn re-reads the truth
            raise
        chat.messages = result.history if result is not None else history
        chat.logs_behind = behind
        chat.sources, chat.next_seq = final_sources, next_seq
        return result
