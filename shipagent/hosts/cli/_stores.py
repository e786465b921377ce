"""``shipagent migrate --to postgresql://…`` / ``--from postgresql://…``: move a project's stores.

Copies every chat's message log, transcript, agent-context log and context files, and the card
tables, then prints one row per chat and store with the source and target counts. Exits 1 when
any store does not match (nothing is overwritten), 2 on a usage or connection error; a re-run
copies only what is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.markup import escape
from rich.table import Table

from ...config import load_config
from ...errors import ShipAgentError
from ...store._files import FileStores
from ...store._migrate import MigrationRow, migrate
from ...store._pg_base import redact
from ...store._postgres import PgStores
from ._opts import ProjectOpt, err, fail, out

__all__ = ["migrate_command"]

_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")


def _table(rows: list[MigrationRow]) -> Table:
    table = Table("chat", "store", "source", "target", "copied", "status")
    for row in rows:
        status = "ok" if row.ok else f"[bold red]MISMATCH[/] {escape(row.note)}"
        chat = "(project)" if row.chat_key is None else escape(row.chat_key)
        table.add_row(chat, row.store, str(row.source), str(row.target), str(row.copied), status)
    return table


def migrate_command(
    project: ProjectOpt = Path("."),
    to: Annotated[
        str | None, typer.Option("--to", help="Copy .ship/ stores into this postgresql:// database.")
    ] = None,
    from_: Annotated[
        str | None, typer.Option("--from", help="Copy this postgresql:// database's stores back into .ship/.")
    ] = None,
) -> None:
    """Copy a project's stores between .ship/ files and Postgres, verifying counts per chat and store."""
    if (to is None) == (from_ is None):
        raise fail("give exactly one of --to postgresql://… or --from postgresql://…")
    url = str(to or from_)
    if not url.startswith(_SCHEMES):
        raise fail(f"{redact(url)!r} is not a postgresql:// URL")
    try:
        config = load_config(project)
    except ShipAgentError as exc:
        raise fail(str(exc)) from None
    window = config.context.agent_context.window_entries
    files = FileStores(project, window=window, project_id=config.name)
    database = PgStores(url, window=window, project_id=config.name)
    source, target = (files, database) if to else (database, files)

    async def run() -> list[MigrationRow]:
        try:
            return await migrate(source, target)
        finally:
            await files.close()
            await database.close()

    try:
        rows = anyio.run(run)
    except ShipAgentError as exc:
        raise fail(str(exc)) from None
    out.print(_table(rows))
    bad = [row for row in rows if not row.ok]
    where = f"{redact(url)}" if to else f"{project / '.ship'}"
    if bad:
        for row in bad:
            chat = "(project)" if row.chat_key is None else repr(row.chat_key)
            err.print(
                escape(f"mismatch: chat {chat} store {row.store}: source {row.source}, target {row.target}")
                + (f": {escape(row.note)}" if row.note else "")
            )
        err.print(f"[bold red]{len(bad)} store(s) do not match[/] in {escape(where)}")
        raise typer.Exit(1)
    chats = len({row.chat_key for row in rows if row.chat_key is not None})
    out.print(f"migrated {chats} chat(s) into {escape(where)}: every store matches")
