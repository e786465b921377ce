"""Per-chat in-memory history, hydrated from disk once and committed turn by turn.

One :class:`ChatHistories` per agent. Each chat key has its own lock, so turns of one chat never
interleave while different chats run concurrently. A committed turn costs a few appends; the
history in memory stays within ``inMemoryMaxMessages`` through compaction.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ..config import ChatHistoryConfig
from .compaction import CompactionResult, compact
from .stores import MessageLog

__all__ = ["ChatHistories", "CompactionHook"]

log = logging.getLogger("shipagent.history")

CompactionHook = Callable[[str, CompactionResult], None]
"""Called (in a worker thread) with the chat key and what a compaction removed."""


@dataclass
class _Chat:
    lock: anyio.Lock
    messages: list[ModelMessage] | None = None
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

    def get(self, chat_key: str) -> list[ModelMessage]:
        """The chat's history (a copy), rebuilt from disk when it is not in memory."""
        chat = self._chat(chat_key)
        if chat.messages is None:
            chat.messages = self.log.rebuild(chat_key)
        return list(chat.messages)

    async def aget(self, chat_key: str) -> list[ModelMessage]:
        chat = self._chat(chat_key)
        if chat.messages is None:
            chat.messages = await anyio.to_thread.run_sync(self.log.rebuild, chat_key)
        return list(chat.messages)

    def clear_memory(self, chat_key: str) -> None:
        """Forget the in-memory copy (the next turn rebuilds it from disk)."""
        self._chat(chat_key).messages = None

    async def reset(self, chat_key: str, request_id: str) -> None:
        """Start the chat's model context afresh; everything said stays on disk.

        Written as a compaction record with an empty history, so a restart agrees.
        """
        async with self.lock(chat_key):
            await anyio.to_thread.run_sync(self.log.append_compaction, chat_key, request_id, [])
            self._chat(chat_key).messages = []

    def _run_hooks(self, chat_key: str, result: CompactionResult) -> None:
        for hook in self.compaction_hooks:
            try:
                hook(chat_key, result)
            except Exception:  # a hook must never cost the user the turn
                log.exception("compaction hook %r failed for chat %r", hook, chat_key)

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
        """
        chat = self._chat(chat_key)
        history = [*base, *new]
        result: CompactionResult | None = None

        def write() -> CompactionResult | None:
            if base_compaction is not None:
                self.log.append_compaction(chat_key, request_id, base)
                self._run_hooks(chat_key, base_compaction)
            self.log.append_turn(chat_key, request_id, new)
            if also is not None:
                also()
            if len(history) > self.config.in_memory_max_messages:
                done = compact(history, self.config.compact_keep_last_messages)
                if done is not None:
                    self._run_hooks(chat_key, done)
                    self.log.append_compaction(chat_key, request_id, done.history)
                    return done
            return None

        try:
            result = await anyio.to_thread.run_sync(write)
        except BaseException:
            chat.messages = None  # part of the turn may be on disk: the next turn re-reads the truth
            raise
        chat.messages = result.history if result is not None else history
        return result
