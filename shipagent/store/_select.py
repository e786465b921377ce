"""Which stores a project uses: the switch ship.json already has.

``durable.enabled`` with ``durable.database`` a ``postgresql://`` URL means workers on several
machines serve the project, so its chats must live in that database too; anything else keeps
today's ``.ship/`` files.
"""

from __future__ import annotations

from pathlib import Path

from ..chatkeys import ShipPaths
from ..config import ShipConfig
from ._files import FileStores
from ._pg_base import is_postgres
from ._pg_cluster import PgClusterStore

__all__ = ["is_postgres", "open_stores"]


def open_stores(project_root: Path, config: ShipConfig) -> FileStores | PgClusterStore:
    """The project's ChatStore (no I/O until first used): Postgres in a durable cluster, else files."""
    window = config.context.agent_context.window_entries
    database = config.durable.database
    if config.durable.enabled and is_postgres(database):
        return PgClusterStore(
            database, window=window, project_id=config.name, paths=ShipPaths(Path(project_root))
        )
    return FileStores(project_root, window=window, project_id=config.name)
