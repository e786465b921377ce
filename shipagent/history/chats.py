"""Per-chat in-memory history, hydrated from disk once and committed turn by turn.

One :class:`ChatHistories` per agent. Each chat key has its own lock, so turns of one chat never
interleave while different chats run concurrently. A committed turn costs a few appends; the
history in memory stays within ``inMemoryMaxMessages`` through compaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ..config import ChatHistoryConfig
from .compaction import CompactionResult, compact
from .injections import strip_injections
from .stores import MessageLog

__all__ = ["ChatHistories", "CompactionHook"]

log = logging.getLogger("shipagent.history")

CompactionHook = Callable[[str, CompactionResult], None]
"""Called (in a worker thread) with the chat key and what a compaction removed."""


@dataclass
class _Chat:
    lock: anyio.Lock
    messages: list[ModelMessage] | None = None


class ChatHistories:
    """The in-memory histories of every chat this process has seen."""

    def __init__(self, paths: ShipPaths, config: ChatHistoryConfig) -> None:
        self.config = config
        self.log = MessageLog(paths)
        self._chats: dict[str, _Chat] = {}
        self.compaction_hooks: list[CompactionHook] = []

    def _chat(self, chat_key: str) -> _Chat:
        chat = self._chats.get(chat_key)
        if chat is None:
            chat = self._chats[chat_key] = _Chat(anyio.Lock())
        return chat

    def lock(self, chat_key: str) -> anyio.Lock:
        """The lock that serialises turns of ``chat_key``."""
        return self._chat(chat_key).lock

    def get(self, chat_key: str) -> list[ModelMessage]:
        """The chat's history (a copy), rebuilt from disk the first time this process sees it."""
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
        chat = self._chat(chat_key)
        async with chat.lock:
            await anyio.to_thread.run_sync(self.log.append_compaction, chat_key, request_id, [])
            chat.messages = []

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
        new = strip_injections(new)  # injections live for one run (seed 002 §3)
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
