"""Which platform messages were accepted (and which answered), on disk: no double answer, no loss.

A long-poll platform redelivers an update until the bot confirms it (Telegram: the next
``getUpdates`` offset). The adapter confirms only after :meth:`Dedupe.accept` has written the
message's ``(chat id, message id)`` here, so a crash between the two replays the update and this
file says it was seen. The window is bounded: the newest ``window`` keys per channel are kept
(older ids are never redelivered by a platform that has moved its offset past them).

An accepted message also carries its content until it is marked :meth:`Dedupe.done`, so a process
killed while answering finds it again on start (:meth:`Dedupe.unfinished`) and answers it then:
the platform will not send it again, since its offset was confirmed.

The answer being streamed into the chat is recorded too (:meth:`Dedupe.replied`): the ids of the
messages it was posted as, written as soon as each is posted. The answer given after a restart
starts from them (:meth:`Dedupe.replies`), editing the half-written message rather than leaving
it in the chat under a second answer.

File: ``.ship/channels/<channel>-seen.jsonl``, one ``{"chat": …, "message": …}`` per line (with
``"payload"`` when accepted, ``"reply": [ids]`` when its answer was posted as those messages,
``"done": true`` when answered), appended with fsync and rewritten to the window when it grows to
twice its size. Each line stands alone (the last ``reply`` line of a message wins), so a crash
between two writes leaves a file that reads as the state before the torn write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from ... import jsonl
from ..._cache import BoundedCache

__all__ = ["Dedupe"]


class Dedupe:
    """The accepted ``(chat id, message id)`` pairs of one channel, newest ``window`` kept."""

    def __init__(self, directory: Path, channel: str, *, window: int = 10_000) -> None:
        self.path = directory / f"{channel}-seen.jsonl"
        self.window = window
        self._seen: BoundedCache[tuple[str, str], None] = BoundedCache(window)  # the newest last
        self._open: dict[tuple[str, str], dict[str, Any]] = {}  # accepted, not answered yet
        self._replies: dict[tuple[str, str], list[str]] = {}  # open -> the messages its answer was posted as
        self._lines = 0
        self._lock = anyio.Lock()
        self._loaded = False

    def _load(self) -> None:
        for row in jsonl.read_all(self.path):  # a torn last line after a crash is skipped
            try:
                key = (str(row["chat"]), str(row["message"]))
            except (KeyError, TypeError):
                continue
            if row.get("done"):
                self._open.pop(key, None)
                self._replies.pop(key, None)
            elif isinstance(row.get("payload"), dict):
                self._open[key] = row["payload"]
            if isinstance(row.get("reply"), list) and key in self._open:
                self._replies[key] = [str(sent) for sent in row["reply"]]
            self._seen[key] = None  # its last line is its place in the window
            self._lines += 1

    def _append(self, row: dict[str, Any]) -> None:
        jsonl.append_line(self.path, row, sync=True)  # on disk before the platform is told
        self._lines += 1
        if self._lines > 2 * self.window:  # keep the file to the window: rewritten whole
            jsonl.rewrite(
                self.path,
                (
                    {
                        "chat": c,
                        "message": m,
                        **({"payload": self._open[c, m]} if (c, m) in self._open else {}),
                        **({"reply": self._replies[c, m]} if (c, m) in self._replies else {}),
                    }
                    # an open message outside the window is still to be answered: kept too
                    for c, m in [*(k for k in self._open if k not in self._seen), *self._seen]
                ),
            )
            self._lines = len(self._seen) + sum(k not in self._seen for k in self._open)

    async def _ensure_loaded(self) -> None:
        if not self._loaded:
            await anyio.to_thread.run_sync(self._load)
            self._loaded = True

    async def accept(self, chat_id: str, message_id: str, payload: dict[str, Any] | None = None) -> bool:
        """Record the message (with ``payload``: until :meth:`done`); ``False`` if seen before."""
        key = (chat_id, message_id)
        async with self._lock:
            await self._ensure_loaded()
            if key in self._seen:
                return False
            self._seen[key] = None
            row: dict[str, Any] = {"chat": chat_id, "message": message_id}
            if payload is not None:
                row["payload"] = payload
                self._open[key] = payload
            try:
                await anyio.to_thread.run_sync(self._append, row)
            except BaseException:  # not on disk: the platform delivers it again; it must not be "seen"
                self._seen.pop(key, None)
                self._open.pop(key, None)
                raise
            return True

    async def done(self, chat_id: str, message_id: str) -> None:
        """The message was dealt with (answered, refused, ignored): it is not replayed after a crash."""
        key = (chat_id, message_id)
        async with self._lock:
            self._replies.pop(key, None)
            if self._open.pop(key, None) is not None:
                await anyio.to_thread.run_sync(
                    self._append, {"chat": chat_id, "message": message_id, "done": True}
                )

    async def unfinished(self) -> list[dict[str, Any]]:
        """Payloads accepted and not :meth:`done` (a process died answering them), oldest first."""
        async with self._lock:
            await self._ensure_loaded()
            return list(self._open.values())

    async def replied(self, chat_id: str, message_id: str, sent: list[str]) -> None:
        """The answer to an open message is in the chat as the messages ``sent`` (their ids, in
        order): on disk when this returns, so an answer cut short by a crash is found again."""
        key = (chat_id, message_id)
        async with self._lock:
            if key not in self._open or self._replies.get(key) == sent:
                return
            self._replies[key] = list(sent)
            await anyio.to_thread.run_sync(
                self._append, {"chat": chat_id, "message": message_id, "reply": list(sent)}
            )

    async def replies(self, messages: list[tuple[str, str]]) -> list[str]:
        """The messages an unfinished answer to any of ``messages`` was posted as, in order."""
        async with self._lock:
            await self._ensure_loaded()
            found: list[str] = []
            for key in messages:
                found += [sent for sent in self._replies.get(key, []) if sent not in found]
            return found
