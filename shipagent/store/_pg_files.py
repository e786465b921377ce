"""Context files shared through Postgres: a spill on one machine is readable on every other.

A durable worker on Postgres keeps its context files where every tool and ``rg`` expects them,
in its own ``.ship/context/<key>/`` (same layout, same index), and :class:`ClusterContextFiles`
keeps that folder a cache of the database:

* every file written here (a spilled tool output, an ``exec_shell`` log, a compacted-history
  file, the catalog, an import) is also stored in ``shipagent.context_content`` with its index
  record in ``shipagent.context_index``, before the call returns;
* every look at a chat's index first appends the index records other workers wrote since this
  process last looked (one indexed query), so ``context_list`` shows them and their ids resolve;
* a file whose bytes are not here yet is fetched when it is first read, and written into the
  folder, so paging, tailing and ripgrep work on a local file as for any other.

Code on an event loop (the ``context_*`` tools, the spill and catalog wrappers) opens
:meth:`ClusterContextFiles.session`: the queries run on its loop (awaited, no thread of their
own), the file work in a worker thread on a local view that never waits on the database. The sync
API (``ShipAgent.context_files``, the CLI) reaches the same queries through
:func:`~shipagent.store._pg_sync.blocking`.

A record another worker wrote for an id this folder already holds (a rewritten catalog) replaces
the local file. Files over :data:`SHARED_MAX_BYTES` stay on the machine that made them (logged).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio

from ..chatkeys import ShipPaths
from ..errors import BadRequestError, ShipAgentError
from ..jsonl import append_lines
from ._pg_sync import blocking, pg_errors, refuse_on_a_loop
from ._postgres import PgStores
from ._protocols import LogRecord
from .files import ContextFiles, ContextRef
from .files._grep import GrepEngine
from .files._store import INDEX_NAME, _write_atomic, safe_child

__all__ = ["SHARED_MAX_BYTES", "ClusterContextFiles"]

log = logging.getLogger("shipagent.store")

_T = TypeVar("_T")

SHARED_MAX_BYTES = 64 << 20
"""Larger files (a huge command log) are not copied into Postgres: memory and ``bytea`` limits."""

_INSTEAD = "the async methods of ContextFiles (alist, aread, atail, agrep, aadd_artifact) or its session()"


class _Local(ContextFiles):
    """The chat's folder as it stands, for blocking work in a thread: it never waits on the database.

    Writes are serialised with the shared store's (one lock) and noted, so the session shares
    them when the work is done.
    """

    def __init__(self, shared: ClusterContextFiles) -> None:
        super().__init__(shared.paths, grep_engine=shared.grep_engine)
        self._shared = shared
        self.added: list[tuple[str, ContextRef]] = []

    def _writing(self) -> contextlib.AbstractContextManager[object]:
        return self._shared._lock

    def _added(self, chat_key: str, refs: Sequence[ContextRef]) -> None:
        self.added.extend((chat_key, ref) for ref in refs)


class ClusterContextFiles(ContextFiles):
    """:class:`ContextFiles` whose writes also go to Postgres and whose reads see every worker's.

    Args:
        paths: this machine's ``.ship/`` (the local copy of every file it reads).
        stores: the cluster's database (its pool serves whichever loop asks).
    """

    def __init__(self, paths: ShipPaths, stores: PgStores, *, grep_engine: GrepEngine | None = None) -> None:
        super().__init__(paths, grep_engine=grep_engine)
        self.stores = stores
        self._seen: dict[str, int] = {}
        """Per chat: the last ``context_index`` seq this process has folded into the local index."""
        self._lock = threading.RLock()

    # --- the queries: awaited on the caller's loop ----------------------------------------------

    async def _db(self, call: Callable[[], Awaitable[_T]]) -> _T:
        with pg_errors(self.stores.pool.url):
            return await call()

    def _blocking(self, call: Callable[[], Awaitable[_T]]) -> _T:
        return blocking(self.stores.pool, call, instead=_INSTEAD)

    def _index_after(self, chat_key: str) -> Callable[[], Awaitable[list[LogRecord]]]:
        seen = self._seen.get(chat_key, 0)
        return lambda: self.stores.context_files.index_after(chat_key, seen)

    def _stored(self, chat_key: str, ref_id: str) -> Callable[[], Awaitable[bytes | None]]:
        return lambda: self.stores.context_files.stored(chat_key, ref_id)

    def _put_query(self, chat_key: str, ref: ContextRef, data: bytes) -> Callable[[], Awaitable[None]]:
        return lambda: self.stores.context_files.put_raw(chat_key, ref.to_json(), data)

    # --- from an event loop -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def session(self, chat_key: str, *, read: str | None = None) -> AsyncIterator[ContextFiles]:
        """The chat's folder brought up to date from Postgres, for file work in a worker thread.

        The index records other workers stored are folded in (and ``read``'s bytes fetched)
        before the block; what the block wrote through the yielded files is stored in Postgres
        after it. The queries are awaited here, on the caller's loop.
        """
        rows = await self._db(self._index_after(chat_key))
        if rows:
            await anyio.to_thread.run_sync(self._fold, chat_key, rows)
        if read is not None:
            missing = await anyio.to_thread.run_sync(self._missing, chat_key, read)
            if missing is not None:
                data = await self._db(self._stored(chat_key, read))
                await anyio.to_thread.run_sync(self._keep_fetched, missing, data)
        local = _Local(self)
        try:
            yield local
        finally:
            # shielded: a block cancelled after its thread wrote (a cancelled turn) still shares
            # what it wrote, as the sync API does before it returns
            with anyio.CancelScope(shield=True):
                for key, ref in local.added:
                    data = await anyio.to_thread.run_sync(self._shareable, key, ref)
                    if data is not None:
                        await self._share_or_say(key, ref, self._put_query(key, ref, data))

    async def _share_or_say(self, chat_key: str, ref: ContextRef, put: Callable[[], Awaitable[None]]) -> None:
        try:
            await self._db(put)
        except ShipAgentError as exc:
            raise _local_only(chat_key, ref, exc) from None

    # --- the folder: blocking, never waits on the database ----------------------------------------

    def _fold(self, chat_key: str, rows: Sequence[LogRecord]) -> None:
        """Append to the local index the records other workers stored since the last look."""
        with self._lock:
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
            self._seen[chat_key] = max(self._seen.get(chat_key, 0), rows[-1].seq)

    def _missing(self, chat_key: str, ref_id: str) -> Path | None:
        """Where ``ref_id``'s bytes go if they are not here yet (``None``: here, lazy or unknown)."""
        ref = super()._refs(chat_key).get(ref_id)
        if ref is None or not ref.eager:
            return None
        path = safe_child(self.folder(chat_key), ref.path, what=f"context file {ref.id!r}")
        return None if path.is_file() else path

    def _keep_fetched(self, path: Path, data: bytes | None) -> None:
        with self._lock:
            if data is not None and not path.is_file():
                _write_atomic(path, data)

    def _shareable(self, chat_key: str, ref: ContextRef) -> bytes | None:
        """The bytes to store for ``ref`` (read back from the local file); ``None``: too big to share."""
        if ref.size_bytes > SHARED_MAX_BYTES:
            log.warning(
                "context file %s of %r (%d bytes) is over %d bytes: kept on this machine only",
                ref.id,
                chat_key,
                ref.size_bytes,
                SHARED_MAX_BYTES,
            )
            return None
        return super().path_of(chat_key, ref).read_bytes()

    # --- the sync API: the same queries through ``blocking`` --------------------------------------

    def _refs(self, chat_key: str) -> dict[str, ContextRef]:
        rows = self._blocking(self._index_after(chat_key))
        if rows:
            self._fold(chat_key, rows)
        return super()._refs(chat_key)

    def path_of(self, chat_key: str, ref: ContextRef) -> Path:
        path = safe_child(self.folder(chat_key), ref.path, what=f"context file {ref.id!r}")
        if ref.eager and not path.is_file():
            self._keep_fetched(path, self._blocking(self._stored(chat_key, ref.id)))
        return super().path_of(chat_key, ref)

    def _writing(self) -> contextlib.AbstractContextManager[object]:
        # refused before the lock: a worker thread holding it may be waiting on this loop
        refuse_on_a_loop(_INSTEAD)
        return self._lock

    def _added(self, chat_key: str, refs: Sequence[ContextRef]) -> None:
        for ref in refs:
            data = self._shareable(chat_key, ref)
            if data is not None:
                try:
                    self._blocking(self._put_query(chat_key, ref, data))
                except ShipAgentError as exc:
                    raise _local_only(chat_key, ref, exc) from None


def _local_only(chat_key: str, ref: ContextRef, exc: ShipAgentError) -> ShipAgentError:
    return ShipAgentError(f"context file {ref.id} of {chat_key!r} exists on this machine only: {exc}")
