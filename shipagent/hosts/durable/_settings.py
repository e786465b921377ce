"""Where the durable system database is and who this worker is: ship.json ``durable`` resolved.

No DBOS import here, so ``shipagent check`` and the CLI can validate the settings cheaply.

The executor id names a worker in DBOS's workflow table: a worker restarted with the same id
resumes the turns it had in flight (DBOS recovers an executor's pending workflows at launch). It
must therefore be *stable across restarts* and *unique among live workers*; uniqueness is claimed
in the database at start (``_heartbeat.claim_executor_id``), since only the database sees every
worker: workers in separate project copies on one machine share no file to lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...config import DurableConfig
from ...errors import ConfigError

__all__ = ["DurableSettings", "resolve_settings"]

QUEUE_NAME = "shipagent_turns"
WORKFLOW_NAME = "shipagent.turn"
APP_NAME = "shipagent"


@dataclass(frozen=True)
class DurableSettings:
    """ship.json ``durable`` made concrete for one project."""

    database_url: str
    """The DBOS system database: ``sqlite:///…/.ship/durable.sqlite`` or a ``postgresql://`` URL."""
    recover_after_seconds: float
    executor_id: str | None
    """The configured id (ship.json, ``--executor-id``), or ``None`` for ``<hostname>:<n>``."""

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    def redacted_url(self) -> str:
        """The database URL without its password (for logs and ``shipagent check``)."""
        if self.is_sqlite or "@" not in self.database_url:
            return self.database_url
        scheme, _, rest = self.database_url.partition("://")
        creds, _, host = rest.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"


def resolve_settings(
    config: DurableConfig, project_root: Path, *, executor_id: str | None = None
) -> DurableSettings:
    """ship.json ``durable`` → concrete settings (``sqlite`` → ``.ship/durable.sqlite``).

    Raises:
        ConfigError: the database is neither ``sqlite`` nor a PostgreSQL URL.
    """
    database = config.database
    if database == "sqlite":
        path = project_root / ".ship" / "durable.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path}"
    elif database.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        url = "postgresql://" + database.split("://", 1)[1]
    else:  # pragma: no cover - the config validator already refused it
        raise ConfigError(
            'durable.database: must be "sqlite" or a postgresql:// URL', path="durable.database"
        )
    chosen = executor_id or os.environ.get("SHIPAGENT_EXECUTOR_ID") or config.executor_id
    return DurableSettings(url, config.recover_after_seconds, chosen)
