"""Browsing a project's chats: which chats a store holds, and pages of a chat's transcript.

What ``GET /v1/chats`` and the transcript pages of the HTTP API (and the web page) read, from
whichever store holds the chats (:meth:`ChatStore.list_chats`, :meth:`ChatStore.transcript_at`).
The files read what the stores wrote under ``.ship/`` (no index of their own to drift out of
date), in a worker thread: they stat or read files. A database answers from its tables.

A transcript page is addressed by a cursor of the store's own: a byte offset in a transcript file
(the file is append-only, so an offset stays valid while new turns arrive, and reading a page
backwards from it costs the page, not the file), a record seq in a database.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import jsonl
from ..chatkeys import ShipPaths, decode_chat_key
from ._record import LogRecord

__all__ = [
    "ChatInfo",
    "TranscriptPage",
    "chats_by_activity",
    "list_file_chats",
    "page_of_records",
    "read_transcript_page",
]


@dataclass(frozen=True, slots=True)
class ChatInfo:
    chat_key: str
    updated: float

    def to_json(self) -> dict[str, Any]:
        stamp = datetime.fromtimestamp(self.updated, UTC).isoformat(timespec="milliseconds")
        return {"chatKey": self.chat_key, "updatedAt": stamp.replace("+00:00", "Z")}


def _first_chat_key(path: Path) -> str | None:
    """The ``chatKey`` of a transcript's first entry (for long keys stored under a hashed name)."""
    try:
        with open(path, "rb") as fh:
            line = fh.readline(1 << 20)
        key = json.loads(line).get("chatKey")
    except (OSError, ValueError, AttributeError):
        return None
    return key if isinstance(key, str) else None


def list_file_chats(paths: ShipPaths) -> list[ChatInfo]:
    """Every chat with files under ``.ship/chats/``, most recently written first."""
    root = paths.ship_dir / "chats"
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    chats: list[ChatInfo] = []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        folder = Path(entry.path)
        key = decode_chat_key(entry.name) if "~" not in entry.name else None
        if key is None:
            key = _first_chat_key(folder / "history.jsonl")
        if key is None:
            continue
        times = [entry.stat().st_mtime]
        for name in ("history.jsonl", "messages.jsonl"):
            try:
                times.append((folder / name).stat().st_mtime)
            except OSError:
                continue
        chats.append(ChatInfo(key, max(times)))
    chats.sort(key=lambda c: (-c.updated, c.chat_key))
    return chats


def chats_by_activity(activity: list[tuple[str, str]]) -> list[ChatInfo]:
    """Chats by ``(chat key, ISO time of its newest record)``, newest first (a database's)."""
    chats = []
    for key, stamp in activity:
        try:
            updated = datetime.fromisoformat(stamp).timestamp()
        except ValueError:  # a record without a time: listed last
            updated = 0.0
        chats.append(ChatInfo(key, updated))
    chats.sort(key=lambda c: (-c.updated, c.chat_key))
    return chats


@dataclass(frozen=True, slots=True)
class TranscriptPage:
    entries: list[dict[str, Any]]
    before: int | None
    """The offset to pass for the next (older) page; ``None`` when the start was reached."""


def read_transcript_page(path: Path, limit: int, before: int | None) -> TranscriptPage:
    """Up to ``limit`` entries ending before byte ``before`` (default: the end), oldest first."""
    found: list[tuple[int, dict[str, Any]]] = []
    for start, raw in jsonl.iter_lines_backward_at(path, end=before):
        if len(found) >= limit:
            break
        try:
            entry = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue  # a torn line (crash mid-write) is skipped, as every store reader does
        if isinstance(entry, dict):
            found.append((start, entry))
    found.reverse()
    oldest = found[0][0] if found else 0
    return TranscriptPage([entry for _, entry in found], oldest if oldest > 0 else None)


def page_of_records(records: list[LogRecord]) -> TranscriptPage:
    """A page of a seq-numbered transcript: its cursor is the oldest record's seq."""
    older = records[0].seq if records and records[0].seq > 1 else None
    return TranscriptPage([r.data for r in records], older)
