"""The embedded card/box store: one SQLite file, ``.ship/cardbox.sqlite3``.

stdlib :mod:`sqlite3` runs in a worker thread (``anyio.to_thread``) so a slow disk never blocks the
event loop that serves other chats. WAL mode lets readers (an inspector, another process) read while
an agent writes. One connection is shared behind a lock: SQLite serialises writers anyway, and a
single connection keeps every transaction's view consistent.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

from ..._cache import BoundedCache
from ...errors import NotFoundError
from ._cards import Box, Card, CardContent, CardRow, NewCard, card_from_row, serialise_card, to_content
from ._ids import new_id
from ._store import BoxId

__all__ = ["SqliteCardBoxStore"]

_T = TypeVar("_T")
_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS cards (
    card_id    TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    type       TEXT NOT NULL,
    content    TEXT NOT NULL,
    author_id  TEXT NOT NULL,
    metadata   TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS boxes (
    box_id     TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS box_cards (
    box_id   TEXT NOT NULL REFERENCES boxes(box_id),
    position INTEGER NOT NULL,
    card_id  TEXT NOT NULL REFERENCES cards(card_id),
    PRIMARY KEY (box_id, position)
);
CREATE TABLE IF NOT EXISTS named_boxes (
    project_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    box_id     TEXT NOT NULL REFERENCES boxes(box_id),
    PRIMARY KEY (project_id, name)
);
"""
_CHUNK = 500  # stay far below SQLite's bound-parameter limit
_REMEMBERED_BOXES = 4096  # (project, next position) of the most recently appended-to boxes
_QUICK_APPEND = 100  # cards one optimistic ``INSERT ... VALUES (...), (...)`` may carry
_BOX_END = (
    "SELECT project_id, (SELECT COALESCE(MAX(position) + 1, 0) FROM box_cards WHERE box_id = ?) "
    "FROM boxes WHERE box_id = ?"
)


def _now() -> str:
    return datetime.now(UTC).isoformat()


class SqliteCardBoxStore:
    """:class:`~shipagent.tools.handover.CardBoxStore` on a SQLite file.

    Args:
        path: the database file (``.ship/cardbox.sqlite3`` for an agent); its directory is created.
        project_id: the project id for calls that pass none.

    The file is opened on first use, so constructing a store (and an agent that owns one) does no
    I/O and needs no running event loop.
    """

    def __init__(self, path: Path, *, project_id: str = "default") -> None:
        self.path = Path(path)
        self._project_id = project_id
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        # box id -> (project id, next position) as of this store's last append to it: lets a
        # turn's append skip reading them; another writer's append makes the insert fail and
        # the append read them after all (see append_to_box_sync).
        # The least recently appended-to box goes first (a lookup does not count).
        self._box_ends: BoundedCache[str, tuple[str, int]] = BoundedCache(_REMEMBERED_BOXES)

    @property
    def project_id(self) -> str:
        return self._project_id

    # -- plumbing ---------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
            self._conn = conn
        return self._conn

    def _read(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._lock:
            return fn(self._connect())

    def _write(
        self, fn: Callable[[sqlite3.Connection], _T], *, committed: Callable[[_T], None] | None = None
    ) -> _T:
        """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction; any exception rolls all of it back.

        ``committed`` gets the result once the transaction is committed, still under the lock.
        """
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            if committed is not None:
                committed(result)
            return result

    async def _run(self, fn: Callable[[], _T]) -> _T:
        return await anyio.to_thread.run_sync(fn)

    def _pid(self, project_id: str | None) -> str:
        return self._project_id if project_id is None else project_id

    # -- rows -------------------------------------------------------------------------------------

    @staticmethod
    def _insert_cards(conn: sqlite3.Connection, items: Sequence[str | CardRow], project_id: str) -> list[str]:
        """Insert the serialised new cards among ``items`` (one statement); all ids, in order."""
        ids = [i if isinstance(i, str) else new_id() for i in items]
        now = _now()
        rows = [(c, project_id, *i, now) for c, i in zip(ids, items, strict=True) if not isinstance(i, str)]
        if rows:
            conn.executemany("INSERT INTO cards VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        return ids

    @staticmethod
    def _require_cards(conn: sqlite3.Connection, card_ids: Sequence[str]) -> None:
        wanted = list(dict.fromkeys(card_ids))
        found: set[str] = set()
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            found.update(
                r[0] for r in conn.execute(f"SELECT card_id FROM cards WHERE card_id IN ({marks})", chunk)
            )
        missing = [c for c in wanted if c not in found]
        if missing:
            raise NotFoundError(
                f"card {missing[0]!r} not found"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            )

    @staticmethod
    def _insert_box(conn: sqlite3.Connection, card_ids: Sequence[str], project_id: str) -> str:
        box_id = new_id()
        conn.execute("INSERT INTO boxes VALUES (?, ?, ?)", (box_id, project_id, _now()))
        conn.executemany(
            "INSERT INTO box_cards VALUES (?, ?, ?)", [(box_id, i, c) for i, c in enumerate(card_ids)]
        )
        return box_id

    # -- the CardBoxStore interface ---------------------------------------------------------------

    async def add_card(
        self,
        *,
        type: str,
        content: CardContent | str | dict[str, Any] | list[Any],
        author_id: str,
        metadata: dict[str, Any] | None = None,
        project_id: str | None = None,
    ) -> str:
        new = NewCard(
            type=type, content=to_content(content), author_id=author_id, metadata=dict(metadata or {})
        )
        pid, row = self._pid(project_id), serialise_card(new)
        return await self._run(lambda: self._write(lambda conn: self._insert_cards(conn, [row], pid)[0]))

    async def get_card(self, card_id: str) -> Card:
        return (await self.get_cards([card_id]))[0]

    async def get_cards(self, card_ids: Sequence[str]) -> list[Card]:
        ids = [str(c) for c in card_ids]

        def read(conn: sqlite3.Connection) -> list[Card]:
            rows: dict[str, Card] = {}
            unique = list(dict.fromkeys(ids))
            for start in range(0, len(unique), _CHUNK):
                chunk = unique[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                for row in conn.execute(f"SELECT * FROM cards WHERE card_id IN ({marks})", chunk):
                    rows[row[0]] = card_from_row(row)
            for card_id in ids:
                if card_id not in rows:
                    raise NotFoundError(f"card {card_id!r} not found")
            return [rows[c] for c in ids]

        return await self._run(lambda: self._read(read))

    async def create_box(self, card_ids: Sequence[str], project_id: str | None = None) -> str:
        box_id, _ = await self.create_box_with([str(c) for c in card_ids], project_id)
        return box_id

    async def create_box_with(
        self, entries: Sequence[str | NewCard], project_id: str | None = None
    ) -> tuple[str, list[str]]:
        pid = self._pid(project_id)
        items = [serialise_card(i) if isinstance(i, NewCard) else i for i in entries]

        def write(conn: sqlite3.Connection) -> tuple[str, list[str]]:
            self._require_cards(conn, [i for i in items if isinstance(i, str)])
            ids = self._insert_cards(conn, items, pid)
            return self._insert_box(conn, ids, pid), ids

        return await self._run(lambda: self._write(write))

    async def get_box(self, box_id: BoxId) -> Box:
        bid = str(box_id)

        def read(conn: sqlite3.Connection) -> Box:
            row = conn.execute("SELECT project_id, created_at FROM boxes WHERE box_id = ?", (bid,)).fetchone()
            if row is None:
                raise NotFoundError(f"box {bid!r} not found")
            cards = conn.execute(
                "SELECT card_id FROM box_cards WHERE box_id = ? ORDER BY position", (bid,)
            ).fetchall()
            return Box(bid, row[0], [c[0] for c in cards], datetime.fromisoformat(row[1]))

        return await self._run(lambda: self._read(read))

    async def append_to_box(self, box_id: BoxId, card_ids: Sequence[str | NewCard]) -> list[str]:
        return await self._run(lambda: self.append_to_box_sync(box_id, card_ids))

    def append_to_box_sync(self, box_id: BoxId, card_ids: Sequence[str | NewCard]) -> list[str]:
        """:meth:`append_to_box` for a caller already in a worker thread (a turn's commit).

        Lets the agent write a turn's cards in the same thread hop as its JSONL stores.
        """
        bid = str(box_id)
        items = [serialise_card(c) if isinstance(c, NewCard) else str(c) for c in card_ids]

        def write(conn: sqlite3.Connection) -> tuple[list[str], str, int]:
            self._require_cards(conn, [i for i in items if isinstance(i, str)])
            known = self._box_ends.peek(bid)
            if known is not None and 0 < len(items) <= _QUICK_APPEND:
                # The usual turn: this store appended to the box last, so it knows the box's
                # project and next position. The positions go in with one statement: if another
                # writer appended since (or the box is gone), the primary key (or the foreign key)
                # fails the whole statement, nothing of it stays, and the box is read below.
                pid, end = known
                ids = self._insert_cards(conn, items, pid)
                marks = ", ".join(["(?, ?, ?)"] * len(ids))
                values = [v for n, c in enumerate(ids) for v in (bid, end + n, c)]
                try:
                    conn.execute(f"INSERT INTO box_cards VALUES {marks}", values)
                    return ids, pid, end + len(ids)
                except sqlite3.IntegrityError:
                    pass
            else:
                ids = []
            row = conn.execute(_BOX_END, (bid, bid)).fetchone()
            if row is None:
                raise NotFoundError(f"box {bid!r} not found")
            pid, end = row
            ids = ids or self._insert_cards(conn, items, pid)
            conn.executemany(
                "INSERT INTO box_cards VALUES (?, ?, ?)", [(bid, end + i, c) for i, c in enumerate(ids)]
            )
            return ids, pid, end + len(ids)

        try:
            return self._write(write, committed=lambda done: self._remember_end(bid, done[1], done[2]))[0]
        except BaseException:
            self._box_ends.pop(bid, None)
            raise

    def box_holds_sync(self, box_id: BoxId, key: str, value: str, *, last: int = 4) -> bool:
        """Whether one of the box's newest ``last`` cards has ``metadata[key] == value``.

        What a turn's commit asks before appending its cards, so a commit run again (after a
        crash, a replayed durable step) writes them once; called from the commit's worker thread.
        """

        def read(conn: sqlite3.Connection) -> bool:
            rows = conn.execute(
                "SELECT c.metadata FROM box_cards b JOIN cards c ON c.card_id = b.card_id "
                "WHERE b.box_id = ? ORDER BY b.position DESC LIMIT ?",
                (str(box_id), last),
            ).fetchall()
            return any(json.loads(row[0]).get(key) == value for row in rows)

        return self._read(read)

    def _remember_end(self, box_id: str, project_id: str, end: int) -> None:
        self._box_ends[box_id] = (project_id, end)

    async def named_box(
        self, name: str, *, initial: Sequence[NewCard] = (), project_id: str | None = None
    ) -> str:
        pid = self._pid(project_id)
        cards = [serialise_card(c) for c in initial]

        def write(conn: sqlite3.Connection) -> str:
            row = conn.execute(
                "SELECT box_id FROM named_boxes WHERE project_id = ? AND name = ?", (pid, name)
            ).fetchone()
            if row is not None:
                return str(row[0])
            ids = self._insert_cards(conn, cards, pid)
            box_id = self._insert_box(conn, ids, pid)
            conn.execute("INSERT INTO named_boxes VALUES (?, ?, ?)", (pid, name, box_id))
            return box_id

        return await self._run(lambda: self._write(write))

    async def close(self) -> None:
        def close() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        await self._run(close)
