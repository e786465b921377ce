"""What was last written to each chat's catalog file, shared by every catalog wrapper of the process.

Agents build a new :class:`~shipagent.tools.files.CatalogToolset` per run, so the memory lives here: an
unchanged catalog costs a look at this table instead of reading the file back. The store forgets a
chat's entry when an import replaces its catalog. A module of its own so that the store and the
wrapper both use it without importing each other.
"""

from __future__ import annotations

import threading

from ..._cache import BoundedCache

__all__ = ["already_written", "forget_catalog", "remember_catalog", "remembered_catalog"]

_REMEMBERED_CHATS = 1024
_written: BoundedCache[str, tuple[str, str]] = BoundedCache(_REMEMBERED_CHATS)
"""chat folder -> (catalog text, the ref's ``created_at``); the least recently written goes first."""
_written_lock = threading.Lock()


def forget_catalog(folder: str) -> None:
    """Drop what is remembered of a chat's catalog (its file was replaced, e.g. by an import)."""
    with _written_lock:
        _written.pop(folder, None)


def already_written(folder: str, text: str) -> bool:
    """Whether ``text`` is what was last written to the chat's catalog (stamp not checked)."""
    with _written_lock:
        seen = _written.peek(folder)
    return seen is not None and seen[0] == text


def remembered_catalog(folder: str) -> tuple[str, str] | None:
    """``(text, created_at)`` last written to the chat's catalog, if remembered."""
    with _written_lock:
        return _written.peek(folder)


def remember_catalog(folder: str, text: str, created_at: str) -> None:
    """Record a write; the least recently written chats are forgotten past 1024."""
    with _written_lock:
        _written[folder] = (text, created_at)
