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
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ... import jsonl
from ..._cache import BoundedCache
from ...chatkeys import ShipPaths
from ._encode import WHOLE_EVERY
from ._records import LedgerItem, RequestRecord, record_label

__all__ = ["LedgerStore", "Mark"]

log = logging.getLogger("shipagent.agent.ledger")
_MAX_PATHS = 4096

Mark = tuple[int, int, int]
"""``(device, inode, size)`` of a chat's ledger file right after this process appended to it."""


class LedgerStore:
    """Reads and appends the request records of every chat of one project."""

    def __init__(self, paths: ShipPaths, *, keep_requests: int = 1000) -> None:
        self._paths = paths
        self.keep_requests = keep_requests
        self._counts: dict[str, int] = {}
        self._paths_of: BoundedCache[str, tuple[Path, Path]] = BoundedCache(_MAX_PATHS)
        self._paths_lock = threading.Lock()  # turns of different chats append from different threads

    def path(self, chat_key: str) -> Path:
        return self._files(chat_key)[0]

    def previous_path(self, chat_key: str) -> Path:
        return self._files(chat_key)[1]

    def _files(self, chat_key: str) -> tuple[Path, Path]:
        """The chat's two files, remembered: a turn asks for them several times, and each ``Path``
        built costs more than the append's own bookkeeping."""
        with self._paths_lock:
            found = self._paths_of.get(chat_key)
        if found is None:
            folder = self._paths.chat_dir(chat_key)
            found = folder / "requests.jsonl", folder / "requests.1.jsonl"
            with self._paths_lock:
                self._paths_of[chat_key] = found
        return found

    def blob_path(self, chat_key: str, key: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"not a ledger blob key: {key!r}")
        return self._paths.chat_dir(chat_key) / "ledger" / f"{key}.txt"

    def append(self, chat_key: str, records: Iterable[RequestRecord], blobs: Mapping[str, str]) -> None:
        """Append a turn's records (one write) and any injected text not kept yet (blocking)."""
        self.append_lines(chat_key, [r.to_json() for r in records], blobs)

    def append_lines(
        self, chat_key: str, lines: list[dict[str, Any]], blobs: Mapping[str, str]
    ) -> Mark | None:
        """:meth:`append` for records already encoded (``RequestRecord.to_json`` form)."""
        return self.append_turn(chat_key, len(lines), None, lambda _continuing: (lines, blobs))

    def append_turn(
        self,
        chat_key: str,
        adding: int,
        mark: Mark | None,
        encode: Callable[[bool], tuple[list[dict[str, Any]], Mapping[str, str]]],
    ) -> Mark | None:
        """Append a turn's ``adding`` lines with one write; the file's :data:`Mark` after it.

        ``encode(continuing)`` makes the lines (and the injected texts they name) once the file is
        open. ``continuing``: they go to the file ``mark`` was taken of, not rotated, replaced or
        cut short since, so they may refer to the records there (version 3). Never across files:
        the previous generation is dropped at the next rotation, so a fresh file starts whole.
        """
        if not adding:
            self._keep_blobs(chat_key, encode(False)[1])
            return None
        path = self.path(chat_key)
        count = self._counts.get(chat_key)
        if count is None:
            count = sum(1 for _ in jsonl.read_all(path)) if path.exists() else 0
        rotated = bool(count) and count + adding > self.keep_requests
        if rotated:
            os.replace(path, self.previous_path(chat_key))  # one previous generation is kept
            count = 0
        fd = jsonl.open_append(path)
        try:
            stat = os.fstat(fd)
            here = (stat.st_dev, stat.st_ino)
            continuing = mark is not None and not rotated and here == mark[:2] and stat.st_size >= mark[2]
            lines, blobs = encode(continuing)
            self._keep_blobs(chat_key, blobs)
            written = jsonl.write_on_fresh_line(fd, stat.st_size, b"".join(map(jsonl.dumps, lines)))
        finally:
            os.close(fd)
        self._counts[chat_key] = count + len(lines)
        return here[0], here[1], stat.st_size + written

    def _keep_blobs(self, chat_key: str, blobs: Mapping[str, str]) -> None:
        for key, text in blobs.items():  # usually none: only a request that carried injections
            path = self.blob_path(chat_key, key)
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, path)

    def read(self, chat_key: str, *, last: int | None = None) -> list[RequestRecord]:
        """The chat's records, oldest first (the previous generation, then the current file).

        A line that cannot be read, or refers to one that cannot (version 3), is left out with a
        warning naming it; :meth:`scan` also says which and why.
        """
        records, _ = self.scan(chat_key)
        return records[-last:] if last else records

    def scan(self, chat_key: str) -> tuple[list[RequestRecord], dict[str, str]]:
        """``(the chat's readable records, oldest first; <requestId>:<step> -> why unreadable)``."""
        out: list[RequestRecord] = []
        unreadable: dict[str, str] = {}
        bases: dict[str, list[LedgerItem]] = {}
        for path in (self.previous_path(chat_key), self.path(chat_key)):
            if not path.exists():
                continue
            for data in jsonl.read_all(path):
                try:
                    record = RequestRecord.from_json(data, bases)
                except (KeyError, TypeError, ValueError) as exc:
                    log.warning("%s: skipping an unreadable ledger record: %s", path, exc)
                    if isinstance(data, dict):
                        reason = (
                            f"field {exc.args[0]!r} is missing" if isinstance(exc, KeyError) else str(exc)
                        )
                        if not reason.startswith("ledger record"):
                            reason = f"{record_label(data)} cannot be read: {reason}"
                        ident = f"{data.get('requestId')}:{data.get('step')}"
                        unreadable[ident] = reason
                        bases.pop(ident, None)  # a later line naming it must not get an older namesake
                    continue
                out.append(record)
                bases[record.id] = record.items
                unreadable.pop(record.id, None)
        return out, unreadable

    def last(self, chat_key: str) -> RequestRecord | None:
        """The chat's newest record, or None when there is none or it cannot be read (blocking).

        Reads the current file (or, when it is empty, the previous generation) backwards only to
        the whole line the newest one is written against: at most :data:`~._encode.WHOLE_EVERY`
        lines or so, however long the file. Why: a process's first turn of a chat compares its
        requests with the chat's last one (cache busts), and must not read the whole ledger for it.
        """
        for path in (self.path(chat_key), self.previous_path(chat_key)):
            chain: list[dict[str, Any]] = []
            for data in jsonl.iter_objects_backward(path):
                if not isinstance(data, dict):
                    continue
                chain.append(data)
                if "base" not in data or len(chain) > 2 * WHOLE_EVERY:
                    break
            if not chain:
                continue
            bases: dict[str, list[LedgerItem]] = {}
            record: RequestRecord | None = None
            for data in reversed(chain):
                try:
                    record = RequestRecord.from_json(data, bases)
                except (KeyError, TypeError, ValueError):
                    record = None
                    continue
                bases[record.id] = record.items
            return record
        return None

    def blob(self, chat_key: str, key: str) -> str:
        return self.blob_path(chat_key, key).read_text(encoding="utf-8")
