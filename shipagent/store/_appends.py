"""What every per-chat store needs on each append: the record's timestamp and its file's path."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

__all__ = ["cached_paths", "now_iso"]

_REMEMBERED_PATHS = 4096  # per store: the paths of the most recently used chats


def now_iso() -> str:
    """The current UTC time as ISO 8601 with milliseconds and a ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cached_paths(path_of: Callable[[str], Path]) -> Callable[[str], Path]:
    """``path_of`` (a :class:`~shipagent.chatkeys.ShipPaths` method) remembered per chat key.

    Encoding a chat key and joining four path parts costs several microseconds, paid by each
    store on every turn; a chat's paths never change, so the recent ones are kept.
    """
    return lru_cache(maxsize=_REMEMBERED_PATHS)(path_of)
