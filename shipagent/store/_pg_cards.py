"""The card/box store on Postgres: the same rows as ``.ship/cardbox.sqlite3``, shared by workers.

Content and metadata are kept as the same JSON text the SQLite store writes and ``created_at`` as
the same ISO text, so ``shipagent migrate`` copies rows verbatim both ways. Appends to one box are
serialised by locking the box's row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import NotFoundError
from ._pg_base import PgPool
from .cards import Box, BoxId, Card, CardContent, NewCard
from .cards._cards import card_from_row, serialise_card, to_content
from .cards._ids import new_id

__all__ = ["PgCardBoxStore", "append_cards"]


def _check(items: Sequence[str | NewCard]) -> None:
    for item in items:
        if isinstance(item, NewCard):
            serialise_card(item)


async def _insert_card(conn: Any, card: NewCard, project_id: str) -> str:
    card_id = new_id()
    await conn.execute(
        "INSERT INTO shipagent.cards VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (card_id, project_id, *serialise_card(card), datetime.now(UTC).isoformat()),
    )
    return card_id


async def _require(conn: Any, card_ids: Sequence[str]) -> None:
    wanted = list(dict.fromkeys(card_ids))
    if not wanted:
        return
    cur = await conn.execute("SELECT card_id FROM shipagent.cards WHERE card_id = ANY(%s)", (wanted,))
    found = {row[0] for row in await cur.fetchall()}
    missing = [c for c in wanted if c not in found]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise NotFoundError(f"card {missing[0]!r} not found{more}")


async def _insert_box(conn: Any, card_ids: Sequence[str], project_id: str) -> str:
    box_id = new_id()
    await conn.execute(
        "INSERT INTO shipagent.boxes VALUES (%s, %s, %s)", (box_id, project_id, datetime.now(UTC).isoformat())
    )
    await _place(conn, box_id, 0, card_ids)
    return box_id


async def _place(conn: Any, box_id: str, start: int, card_ids: Sequence[str]) -> None:
    if card_ids:
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO shipagent.box_cards VALUES (%s, %s, %s)",
                [(box_id, start + i, c) for i, c in enumerate(card_ids)],
            )


async def append_cards(conn: Any, box_id: str, items: Sequence[str | NewCard]) -> list[str]:
    """Append to a box inside the caller's transaction (``commit_turn`` uses it too)."""
    cur = await conn.execute("SELECT project_id FROM shipagent.boxes WHERE box_id = %s FOR UPDATE", (box_id,))
    row = await cur.fetchone()
    if row is None:
        raise NotFoundError(f"box {box_id!r} not found")
    await _require(conn, [i for i in items if isinstance(i, str)])
    ids = [i if isinstance(i, str) else await _insert_card(conn, i, row[0]) for i in items]
    cur = await conn.execute(
        "SELECT coalesce(max(position) + 1, 0) FROM shipagent.box_cards WHERE box_id = %s", (box_id,)
    )
    (end,) = await cur.fetchone()
    await _place(conn, box_id, int(end), ids)
    return ids


async def named_box_in(conn: Any, project_id: str, name: str, initial: Sequence[NewCard] = ()) -> str:
    """Get or create the box registered under ``name``, inside the caller's transaction."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 1))", (f"{project_id}\x1f{name}",))
    cur = await conn.execute(
        "SELECT box_id FROM shipagent.named_boxes WHERE project_id = %s AND name = %s", (project_id, name)
    )
    row = await cur.fetchone()
    if row is not None:
        return str(row[0])
    ids = [await _insert_card(conn, c, project_id) for c in initial]
    box_id = await _insert_box(conn, ids, project_id)
    await conn.execute("INSERT INTO shipagent.named_boxes VALUES (%s, %s, %s)", (project_id, name, box_id))
    return box_id


class PgCardBoxStore:
    """:class:`~shipagent.tools.handover.CardBoxStore` on Postgres (tables ``shipagent.cards``, ``boxes``, …)."""

    def __init__(self, pool: PgPool, *, project_id: str = "default") -> None:
        self._pool = pool
        self._project_id = project_id

    @property
    def project_id(self) -> str:
        return self._project_id

    def _pid(self, project_id: str | None) -> str:
        return self._project_id if project_id is None else project_id

    async def add_card(
        self,
        *,
        type: str,
        content: CardContent | str | dict[str, Any] | list[Any],
        author_id: str,
        metadata: dict[str, Any] | None = None,
        project_id: str | None = None,
    ) -> str:
        card = NewCard(
            type=type, content=to_content(content), author_id=author_id, metadata=dict(metadata or {})
        )
        _check([card])
        async with self._pool.connection() as conn, conn.transaction():
            return await _insert_card(conn, card, self._pid(project_id))

    async def get_card(self, card_id: str) -> Card:
        return (await self.get_cards([card_id]))[0]

    async def get_cards(self, card_ids: Sequence[str]) -> list[Card]:
        ids = [str(c) for c in card_ids]
        found = await self._pool.fetch(
            "SELECT * FROM shipagent.cards WHERE card_id = ANY(%s)", (list(set(ids)),)
        )
        rows = {row[0]: row for row in found}
        for card_id in ids:
            if card_id not in rows:
                raise NotFoundError(f"card {card_id!r} not found")
        return [card_from_row(rows[c]) for c in ids]

    async def create_box(self, card_ids: Sequence[str], project_id: str | None = None) -> str:
        box_id, _ = await self.create_box_with([str(c) for c in card_ids], project_id)
        return box_id

    async def create_box_with(
        self, entries: Sequence[str | NewCard], project_id: str | None = None
    ) -> tuple[str, list[str]]:
        items = list(entries)
        _check(items)
        pid = self._pid(project_id)
        async with self._pool.connection() as conn, conn.transaction():
            await _require(conn, [i for i in items if isinstance(i, str)])
            ids = [i if isinstance(i, str) else await _insert_card(conn, i, pid) for i in items]
            return await _insert_box(conn, ids, pid), ids

    async def get_box(self, box_id: BoxId) -> Box:
        bid = str(box_id)
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT project_id, created_at FROM shipagent.boxes WHERE box_id = %s", (bid,)
            )
            row = await cur.fetchone()
            if row is None:
                raise NotFoundError(f"box {bid!r} not found")
            cur = await conn.execute(
                "SELECT card_id FROM shipagent.box_cards WHERE box_id = %s ORDER BY position", (bid,)
            )
            cards = [c[0] for c in await cur.fetchall()]
        return Box(bid, row[0], cards, datetime.fromisoformat(row[1]))

    async def append_to_box(self, box_id: BoxId, card_ids: Sequence[str | NewCard]) -> list[str]:
        items = [c if isinstance(c, NewCard) else str(c) for c in card_ids]
        _check(items)
        async with self._pool.connection() as conn, conn.transaction():
            return await append_cards(conn, str(box_id), items)

    async def named_box(
        self, name: str, *, initial: Sequence[NewCard] = (), project_id: str | None = None
    ) -> str:
        _check(list(initial))
        async with self._pool.connection() as conn, conn.transaction():
            return await named_box_in(conn, self._pid(project_id), name, initial)

    async def close(self) -> None:
        await self._pool.close()
