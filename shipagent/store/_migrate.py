"""Copy a project's stores between ``.ship/`` files and Postgres, and prove the copy is whole.

Per chat and store the target must end up with exactly the source's records: a store the target
does not have yet is copied; one it holds a prefix of (an interrupted run) is completed; one that
already matches is left alone (so a re-run is a no-op); anything else is a mismatch and is
reported, never overwritten. Cards and boxes are project-wide rows copied by id.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ._files import FileStores
from ._pg_base import dumps
from ._postgres import PgStores
from ._protocols import RecordLog

__all__ = ["MigrationRow", "migrate"]

AnyStores = FileStores | PgStores
_CARD_TABLES = {  # table: its key columns (rows are identical on both sides)
    "cards": ("card_id",),
    "boxes": ("box_id",),
    "box_cards": ("box_id", "position"),
    "named_boxes": ("project_id", "name"),
}


@dataclass(frozen=True, slots=True)
class MigrationRow:
    """One line of the report: a store of a chat (``chat_key=None``: project-wide card tables)."""

    chat_key: str | None
    store: str
    source: int
    target: int
    copied: int
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.source == self.target and not self.note


async def _copy_log(chat_key: str, name: str, source: RecordLog, target: RecordLog) -> MigrationRow:
    records = [r.data for r in await source.records(chat_key)]
    have = [r.data for r in await target.records(chat_key)]
    copied, note = 0, ""
    if [dumps(r) for r in have] == [dumps(r) for r in records[: len(have)]]:
        missing = records[len(have) :]
        if missing:
            await target.append_records(chat_key, missing)
            copied = len(missing)
    else:
        note = "target holds different records; not touched"
    return MigrationRow(chat_key, name, len(records), await target.count(chat_key), copied, note)


async def _copy_context(chat_key: str, source: AnyStores, target: AnyStores) -> list[MigrationRow]:
    records = await source.context_files.index(chat_key)
    have = await target.context_files.index(chat_key)
    copied, note = 0, ""
    if [dumps(r) for r in have] == [dumps(r) for r in records[: len(have)]]:
        last_of = {str(r.get("id")): i for i, r in enumerate(records)}
        for i, record in enumerate(records[len(have) :], start=len(have)):
            content = None
            if last_of[str(record.get("id"))] == i and record.get("eager", True):
                try:
                    content = await source.context_files.content(chat_key, str(record["id"]))
                except Exception as exc:  # a missing file stays missing, the index line is kept
                    note = f"content of {record.get('id')!r} unreadable: {exc}"
            await target.context_files.put_raw(chat_key, record, content)
            copied += 1
    else:
        note = "target holds different index records; not touched"
    rows = [
        MigrationRow(
            chat_key,
            "contextIndex",
            len(records),
            len(await target.context_files.index(chat_key)),
            copied,
            note,
        )
    ]
    files = {r.id for r in await source.context_files.list(chat_key) if r.eager}
    same = 0
    for ref_id in sorted(files):
        try:
            if await source.context_files.content(chat_key, ref_id) == await target.context_files.content(
                chat_key, ref_id
            ):
                same += 1
        except Exception:
            continue
    rows.append(MigrationRow(chat_key, "contextFiles", len(files), same, 0))
    return rows


def _sqlite_rows(stores: FileStores, table: str) -> list[tuple[Any, ...]]:
    def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
        return list(conn.execute(f"SELECT * FROM {table}"))

    return stores.cards._read(read)


async def _rows(stores: AnyStores, table: str) -> list[tuple[Any, ...]]:
    if isinstance(stores, FileStores):
        return await anyio.to_thread.run_sync(_sqlite_rows, stores, table)
    async with stores.pool.connection() as conn:
        cur = await conn.execute(f"SELECT * FROM shipagent.{table}")
        return [tuple(row) for row in await cur.fetchall()]


async def _insert(stores: AnyStores, table: str, rows: list[tuple[Any, ...]]) -> None:
    if not rows:
        return
    marks = ", ".join(["%s"] * len(rows[0]))
    if isinstance(stores, FileStores):
        sql = f"INSERT OR IGNORE INTO {table} VALUES ({marks.replace('%s', '?')})"

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(sql, rows)

        await anyio.to_thread.run_sync(stores.cards._write, write)
        return
    async with stores.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await cur.executemany(f"INSERT INTO shipagent.{table} VALUES ({marks}) ON CONFLICT DO NOTHING", rows)


async def _copy_cards(source: AnyStores, target: AnyStores) -> list[MigrationRow]:
    out = []
    for table, key_columns in _CARD_TABLES.items():  # parents before children (foreign keys)
        rows = await _rows(source, table)
        width = len(key_columns)
        before = {
            tuple(r[:width]) if table != "named_boxes" else tuple(r[:2]) for r in await _rows(target, table)
        }
        missing = [r for r in rows if tuple(r[:width]) not in before]
        await _insert(target, table, missing)
        after = {tuple(r[:width]): r for r in await _rows(target, table)}
        differing = sum(
            1 for r in rows if tuple(r[:width]) in after and tuple(after[tuple(r[:width])]) != tuple(r)
        )
        present = sum(1 for r in rows if tuple(r[:width]) in after)
        note = f"{differing} rows differ from the source" if differing else ""
        out.append(MigrationRow(None, table, len(rows), present, len(missing), note))
    return out


async def migrate(
    source: AnyStores, target: AnyStores, *, progress: Callable[[str], None] | None = None
) -> list[MigrationRow]:
    """Copy every chat of ``source`` into ``target`` and report each store's counts."""
    report: list[MigrationRow] = []
    logs = (("messages", "messages"), ("transcript", "transcript"), ("agentContext", "agent_context"))
    keys: set[str] = set(await source.context_files.chat_keys())
    for _, attr in logs:
        keys.update(await getattr(source, attr).chat_keys())
    for chat_key in sorted(keys):
        if progress is not None:
            progress(chat_key)
        for name, attr in logs:
            if await getattr(source, attr).count(chat_key) or await getattr(target, attr).count(chat_key):
                report.append(await _copy_log(chat_key, name, getattr(source, attr), getattr(target, attr)))
        if await source.context_files.index(chat_key):
            report.extend(await _copy_context(chat_key, source, target))
    report.extend(await _copy_cards(source, target))
    return report
