"""``.ship/chats/<key>/requests.jsonl``: the ledger of one chat, append-only and bounded.

A turn's records are appended with one write when the turn commits. When the file holds
``keepRequests`` records it is renamed to ``requests.1.jsonl`` (replacing the generation before)
and a new file starts: no file is ever rewritten, a turn costs one append, and reading "the last
N" touches at most two files of bounded size — ledger cost does not grow with the chat's history.

Injected texts are not in the records (an injection lives for one run and may be large); they are
kept content-addressed beside them, ``ledger/<sha256>.txt``, each written once, so a reconstructed
request carries them byte for byte.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import jsonl
from ..chatkeys import ShipPaths
from ._records import RequestRecord

__all__ = ["LedgerStore"]

log = logging.getLogger("shipagent.ledger")


class LedgerStore:
    """Reads and appends the request records of every chat of one project."""

    def __init__(self, paths: ShipPaths, *, keep_requests: int = 1000) -> None:
        self._paths = paths
        self.keep_requests = keep_requests
        self._counts: dict[str, int] = {}

    def path(self, chat_key: str) -> Path:
        return self._paths.chat_dir(chat_key) / "requests.jsonl"

    def previous_path(self, chat_key: str) -> Path:
        return self._paths.chat_dir(chat_key) / "requests.1.jsonl"

    def blob_path(self, chat_key: str, key: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"not a ledger blob key: {key!r}")
        return self._paths.chat_dir(chat_key) / "ledger" / f"{key}.txt"

    def append(self, chat_key: str, records: Iterable[RequestRecord], blobs: Mapping[str, str]) -> None:
        """Append a turn's records (one write) and any injected text not kept yet (blocking)."""
        self.append_lines(chat_key, [r.to_json() for r in records], blobs)

    def append_lines(self, chat_key: str, lines: list[dict[str, Any]], blobs: Mapping[str, str]) -> None:
        """:meth:`append` for records already encoded (``RequestRecord.to_json`` form)."""
        for key, text in blobs.items():
            path = self.blob_path(chat_key, key)
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, path)
        if not lines:
            return
        path = self.path(chat_key)
        count = self._counts.get(chat_key)
        if count is None:
            count = sum(1 for _ in jsonl.read_all(path)) if path.exists() else 0
        if count and count + len(lines) > self.keep_requests:
            os.replace(path, self.previous_path(chat_key))  # one previous generation is kept
            count = 0
        jsonl.append_lines(path, lines)
        self._counts[chat_key] = count + len(lines)

    def read(self, chat_key: str, *, last: int | None = None) -> list[RequestRecord]:
        """The chat's records, oldest first (the previous generation, then the current file)."""
        out: list[RequestRecord] = []
        for path in (self.previous_path(chat_key), self.path(chat_key)):
            if path.exists():
                for data in jsonl.read_all(path):
                    try:
                        out.append(RequestRecord.from_json(data))
                    except (KeyError, TypeError, ValueError) as exc:
                        log.warning("%s: skipping an unreadable ledger record: %s", path, exc)
        return out[-last:] if last else out

    def blob(self, chat_key: str, key: str) -> str:
        return self.blob_path(chat_key, key).read_text(encoding="utf-8")
