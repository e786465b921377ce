"""Executor heartbeats: one row per worker, so live workers can tell who died.

DBOS resumes an executor's pending workflows only when that executor restarts. A worker that dies
for good would leave its in-flight turns (and, through the per-chat partition, every later turn of
those chats) waiting forever. So every worker writes ``(executor_id, heartbeat_at)`` every few
seconds into a small table next to DBOS's own, and periodically looks for rows older than
``recoverAfterSeconds``. Taking over a dead executor is a conditional ``UPDATE`` of its row
(``… WHERE heartbeat_at < cutoff``): the database lets exactly one worker win it, on Postgres and
on SQLite alike, so two live workers do not both recover the same executor (and if they did,
DBOS's re-enqueue only matches a turn still pending on the dead executor, so nothing runs twice).

On Postgres the clock is the database server's (``clock_timestamp()``), so workers on machines
with skewed clocks agree on who is stale. SQLite is one machine, so Python's clock is the clock.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from typing import Any

from ._settings import DurableSettings

__all__ = ["Heartbeats"]

_TABLE = "shipagent_executors"
_DDL_LOCK = 0x5A1D_DB05
"""Advisory lock key under which the table is created (any constant no one else uses)."""


class Heartbeats:
    """The heartbeat table of one durable database (blocking calls: run them in a thread)."""

    def __init__(self, settings: DurableSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._conn: Any = None

    # -- connection ------------------------------------------------------------------------------

    def _connect(self) -> Any:
        if self._conn is None:
            if self.settings.is_sqlite:
                path = self.settings.database_url.removeprefix("sqlite:///")
                conn: Any = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
                # WAL (a property of the file, so DBOS's connections use it too): a commit is one
                # append to the log instead of a rollback journal written, synced and deleted,
                # and readers do not block the writer. Committed data survives a killed process.
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {_TABLE} (executor_id TEXT PRIMARY KEY, "
                    "heartbeat_at REAL NOT NULL, pid INTEGER, host TEXT)"
                )
            else:
                import psycopg

                conn = psycopg.connect(self.settings.database_url, autocommit=True, connect_timeout=10)
                # Workers starting together would race ``CREATE TABLE IF NOT EXISTS`` (Postgres can
                # fail one with a duplicate pg_type key): serialise it on a transaction lock.
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                    conn.execute(
                        f"CREATE TABLE IF NOT EXISTS {_TABLE} (executor_id TEXT PRIMARY KEY, "
                        "heartbeat_at DOUBLE PRECISION NOT NULL, pid INTEGER, host TEXT)"
                    )
            self._conn = conn
        return self._conn

    def _now(self) -> str:
        return "?" if self.settings.is_sqlite else "EXTRACT(EPOCH FROM clock_timestamp())"

    def _sql(self, sql: str) -> str:
        return sql if self.settings.is_sqlite else sql.replace("?", "%s")

    def _run(self, sql: str, params: tuple[Any, ...]) -> Any:
        """Execute with SQLite's Python clock spliced in for each ``{now}`` (the same instant)."""
        now_params: tuple[Any, ...] = ()
        count = sql.count("{now}")
        if self.settings.is_sqlite:
            now_params = (time.time(),) * count
        text = sql.replace("{now}", self._now())
        # {now} placeholders come first in every statement below, so their values lead
        with self._lock:
            try:
                return self._connect().execute(self._sql(text), (*now_params, *params))
            except Exception:
                self.close()  # a broken connection is reopened on the next call
                raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a dead connection
                conn.close()

    # -- operations ------------------------------------------------------------------------------

    def beat(self, executor_id: str, pid: int, host: str) -> None:
        """Record that ``executor_id`` is alive now."""
        self._run(
            f"INSERT INTO {_TABLE} (heartbeat_at, executor_id, pid, host) VALUES ({{now}}, ?, ?, ?) "
            "ON CONFLICT (executor_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, "
            "pid = excluded.pid, host = excluded.host",
            (executor_id, pid, host),
        )

    def stale(self, me: str, older_than: float) -> list[str]:
        """Executors other than ``me`` whose last heartbeat is older than ``older_than`` seconds."""
        cursor = self._run(
            f"SELECT executor_id FROM {_TABLE} WHERE heartbeat_at < {{now}} - ? AND executor_id <> ? "
            "ORDER BY executor_id",
            (older_than, me),
        )
        return [row[0] for row in cursor.fetchall()]

    def claim(self, dead: str, older_than: float) -> bool:
        """Take over ``dead`` if it is still stale; exactly one caller wins.

        The winner's claim refreshes the row, so for ``older_than`` seconds nobody else tries;
        the winner removes the row (:meth:`forget`) once the dead executor's turns are back on
        the queue. A winner that dies in between leaves the row to go stale again, and another
        worker finishes the job.
        """
        cursor = self._run(
            f"UPDATE {_TABLE} SET heartbeat_at = {{now}} WHERE heartbeat_at < {{now}} - ? AND executor_id = ?",
            (older_than, dead),
        )
        return bool(cursor.rowcount == 1)

    def forget(self, executor_id: str) -> None:
        """Remove a dead executor's row after its turns were put back on the queue."""
        self._run(f"DELETE FROM {_TABLE} WHERE executor_id = ?", (executor_id,))

    def ages(self) -> dict[str, float]:
        """Seconds since each executor's last heartbeat (for ``shipagent recover`` and ``check``)."""
        cursor = self._run(f"SELECT executor_id, {{now}} - heartbeat_at FROM {_TABLE}", ())
        return {row[0]: float(row[1]) for row in cursor.fetchall()}
