"""Context files shared through Postgres: a spill on one machine is readable on every other.

A durable worker on Postgres keeps its context files where every tool and ``rg`` expects them,
in its own ``.ship/context/<key>/`` (same layout, same index), and :class:`SharedContextFiles`
keeps that folder a cache of the database:

* every file written here (a spilled tool output, an ``exec_shell`` log, a compacted-history
  file, the catalog, an import) is also stored in ``shipagent.context_content`` with its index
  record in ``shipagent.context_index``, before the call returns;
* every look at a chat's index first appends the index records other workers wrote since this
  process last looked (one indexed query), so ``context_list`` shows them and their ids resolve;
* a file whose bytes are not here yet is fetched when it is first read, and written into the
  folder, so paging, tailing and ripgrep work on a local file as for any other.

A record another worker wrote for an id this folder already holds (a rewritten catalog) replaces
the local file. Files over :data:`SHARED_MAX_BYTES` stay on the machine that made them (logged).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..chatkeys import ShipPaths
from ..errors import BadRequestError, ShipAgentError
from ..jsonl import append_lines
from ._bridge import PgBridge
from .files import ContextFiles, ContextRef
from .files._grep import GrepEngine
from .files._store import INDEX_NAME, _write_atomic, safe_child

__all__ = ["SHARED_MAX_BYTES", "SharedContextFiles"]

log = logging.getLogger("shipagent.store")

SHARED_MAX_BYTES = 64 << 20
"""Larger files (a huge command log) are not copied into Postgres: memory and ``bytea`` limits."""


class SharedContextFiles(ContextFiles):
    """:class:`ContextFiles` whose writes also go to Postgres and whose reads see every worker's.

    Args:
        paths: this machine's ``.ship/`` (the local copy of every file it reads).
        bridge: the database (see :class:`PgBridge`).
    """

    def __init__(self, paths: ShipPaths, bridge: PgBridge, *, grep_engine: GrepEngine | None = None) -> None:
        super().__init__(paths, grep_engine=grep_engine)
        self.bridge = bridge
        self._seen: dict[str, int] = {}
        """Per chat: the last ``context_index`` seq this process has folded into the local index."""
        self._lock = threading.RLock()

    # --- reading what other workers wrote -----------------------------------------------------

    def _refs(self, chat_key: str) -> dict[str, ContextRef]:
        self._pull(chat_key)
        return super()._refs(chat_key)

    def _pull(self, chat_key: str) -> None:
        """Append to the local index the records other workers stored since the last look."""
        with self._lock:
            seen = self._seen.get(chat_key, 0)
            rows = self.bridge.call(lambda s: s.context_files.index_after(chat_key, seen))
            if not rows:
                return
            local = super()._refs(chat_key)
            newest: dict[str, dict[str, Any]] = {}
            for row in rows:  # a later record of an id wins, as in the index
                newest.pop(str(row.data.get("id")), None)
                newest[str(row.data.get("id"))] = row.data
            folder = self.folder(chat_key)
            fresh: list[dict[str, Any]] = []
            for ref_id, record in newest.items():
                try:
                    ref = ContextRef.from_json(record, where=f"shared context index of {chat_key!r}")
                    path = safe_child(folder, ref.path, what=f"context file {ref.id!r}")
                except BadRequestError as exc:
                    log.warning("skipping a shared context index record: %s", exc)
                    continue
                mine = local.get(ref_id)
                if mine is not None and mine.to_json() == ref.to_json():
                    continue  # this process wrote it, or folded it in already
                if mine is not None:  # another version of the id: its bytes are fetched on read
                    path.unlink(missing_ok=True)
                fresh.append(record)
            if fresh:
                append_lines(folder / INDEX_NAME, fresh)
            self._seen[chat_key] = rows[-1].seq

    def path_of(self, chat_key: str, ref: ContextRef) -> Path:
        path = safe_child(self.folder(chat_key), ref.path, what=f"context file {ref.id!r}")
        if ref.eager and not path.is_file():
            with self._lock:
                data = self.bridge.call(lambda s: s.context_files.stored(chat_key, ref.id))
                if data is not None and not path.is_file():
                    _write_atomic(path, data)
        return super().path_of(chat_key, ref)

    # --- writing for every worker -------------------------------------------------------------

    def _writing(self) -> contextlib.AbstractContextManager[object]:
        return self._lock

    def _added(self, chat_key: str, refs: Sequence[ContextRef]) -> None:
        for ref in refs:
            self._share(chat_key, ref)

    def _share(self, chat_key: str, ref: ContextRef) -> None:
        """Store ``ref`` and its bytes (read back from the local file) in Postgres."""
        path = super().path_of(chat_key, ref)
        if ref.size_bytes > SHARED_MAX_BYTES:
            log.warning(
                "context file %s of %r (%d bytes) is over %d bytes: kept on this machine only",
                ref.id,
                chat_key,
                ref.size_bytes,
                SHARED_MAX_BYTES,
            )
            return
        data = path.read_bytes()
        try:
            self.bridge.call(lambda s: s.context_files.put_raw(chat_key, ref.to_json(), data))
        except ShipAgentError as exc:
            raise ShipAgentError(
                f"context file {ref.id} of {chat_key!r} exists on this machine only: {exc}"
            ) from None
