"""Where the durable system database is and who this worker is: ship.json ``durable`` resolved.

No DBOS import here, so ``shipagent check`` and the CLI can validate the settings cheaply.

The executor id names a worker in DBOS's workflow table: a worker restarted with the same id
resumes the turns it had in flight (DBOS recovers an executor's pending workflows at launch). It
must therefore be *stable across restarts* and *unique among live workers*. The default is
``<hostname>:<slot>`` where the slot is the smallest number whose lock file under
``.ship/durable/slots/`` this process can ``flock``: the first worker on a machine is always
``host:0``, the second ``host:1``; a worker killed with ``kill -9`` drops its lock, so its
replacement gets the same slot back and finishes its turns.
"""

from __future__ import annotations

import fcntl
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..config import DurableConfig
from ..errors import ConfigError

__all__ = ["DurableSettings", "ExecutorSlot", "claim_slot", "resolve_settings"]

QUEUE_NAME = "shipagent_turns"
WORKFLOW_NAME = "shipagent.turn"
APP_NAME = "shipagent"
MAX_SLOTS = 1024


@dataclass(frozen=True)
class DurableSettings:
    """ship.json ``durable`` made concrete for one project."""

    database_url: str
    """The DBOS system database: ``sqlite:///…/.ship/durable.sqlite`` or a ``postgresql://`` URL."""
    recover_after_seconds: float
    executor_id: str | None
    """The configured id (ship.json, ``--executor-id``), or ``None`` for ``<hostname>:<slot>``."""

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


@dataclass
class ExecutorSlot:
    """A claimed ``<hostname>:<slot>`` executor id; the lock is held until :meth:`release`."""

    executor_id: str
    _handle: IO[bytes] | None = None

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the descriptor drops the flock
            self._handle = None


def claim_slot(project_root: Path, settings: DurableSettings) -> ExecutorSlot:
    """This process's executor id: the configured one, else the first free ``<hostname>:<slot>``.

    Raises:
        ConfigError: all slots are taken (more than 1024 workers of one project on one machine).
    """
    if settings.executor_id:
        return ExecutorSlot(settings.executor_id)
    folder = project_root / ".ship" / "durable" / "slots"
    folder.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname() or "localhost"
    for slot in range(MAX_SLOTS):
        handle = open(folder / f"{slot}.lock", "ab")  # noqa: SIM115 - kept open to hold the lock
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        return ExecutorSlot(f"{host}:{slot}", handle)
    raise ConfigError(
        f"durable: all {MAX_SLOTS} executor slots under {folder} are taken", path="durable.executorId"
    )
