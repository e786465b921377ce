"""Which platform messages were already accepted, on disk, so a replayed update is not answered twice.

A long-poll platform redelivers an update until the bot confirms it (Telegram: the next
``getUpdates`` offset). The adapter confirms only after :meth:`Dedupe.accept` has written the
message's ``(chat id, message id)`` here, so a crash between the two replays the update and this
file says it was seen. The window is bounded: the newest ``window`` keys per channel are kept
(older ids are never redelivered by a platform that has moved its offset past them).

File: ``.ship/channels/<channel>-seen.jsonl``, one ``{"chat": …, "message": …}`` per line, appended
with fsync and rewritten to the window when it grows to twice its size.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path

import anyio
import anyio.to_thread

__all__ = ["Dedupe"]


class Dedupe:
    """The accepted ``(chat id, message id)`` pairs of one channel, newest ``window`` kept."""

    def __init__(self, directory: Path, channel: str, *, window: int = 10_000) -> None:
        self.path = directory / f"{channel}-seen.jsonl"
        self.window = window
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lines = 0
        self._lock = anyio.Lock()
        self._loaded = False

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        for line in text.splitlines():
            try:
                row = json.loads(line)
                key = (str(row["chat"]), str(row["message"]))
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line after a crash: that message was not confirmed anyway
            self._seen[key] = None
            self._seen.move_to_end(key)
            self._lines += 1
        while len(self._seen) > self.window:
            self._seen.popitem(last=False)

    def _append(self, key: tuple[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"chat": key[0], "message": key[1]}) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self._lines += 1
        if self._lines > 2 * self.window:
            tmp = self.path.with_suffix(".tmp")
            body = "".join(json.dumps({"chat": c, "message": m}) + "\n" for c, m in self._seen)
            tmp.write_text(body, encoding="utf-8")
            os.replace(tmp, self.path)
            self._lines = len(self._seen)

    async def accept(self, chat_id: str, message_id: str) -> bool:
        """Record the message; ``False`` if it was accepted before (then do nothing with it)."""
        key = (chat_id, message_id)
        async with self._lock:
            if not self._loaded:
                await anyio.to_thread.run_sync(self._load)
                self._loaded = True
            if key in self._seen:
                return False
            self._seen[key] = None
            while len(self._seen) > self.window:
                self._seen.popitem(last=False)
            await anyio.to_thread.run_sync(self._append, key)
            return True
