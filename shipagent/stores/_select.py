"""Which stores a project uses: the switch ship.json already has.

``durable.enabled`` with ``durable.database`` a ``postgresql://`` URL means workers on several
machines serve the project, so its chats must live in that database too; anything else keeps
today's ``.ship/`` files.
"""

from __future__ import annotations

from pathlib import Path

from ..config import ShipConfig
from ._files import FileStores
from ._postgres import PgStores

__all__ = ["is_postgres", "open_stores"]


def is_postgres(database: str) -> bool:
    """Whether ship.json ``durable.database`` names a Postgres server (else SQLite)."""
    return database.startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def open_stores(project_root: Path, config: ShipConfig) -> FileStores | PgStores:
    """The project's stores (no I/O until first used): Postgres in a durable cluster, else files."""
    window = config.context.agent_context.window_entries
    database = config.durable.database
    if config.durable.enabled and is_postgres(database):
        return PgStores(database, window=window, project_id=config.name)
    return FileStores(project_root, window=window, project_id=config.name)
