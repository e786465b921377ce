"""Executor ids and heartbeats: one row per executor id, owned by exactly one live process.

DBOS resumes an executor's pending workflows only when a process with that executor id launches.
Two live processes under one id are therefore a trap: the survivor of the pair keeps the id's
heartbeat fresh, so nobody ever resumes the dead one's turns. So an id is *claimed* in this
table, next to DBOS's own: the row holds a random owner token, the claimant's pid and where the
process lives (boot id, pid namespace, process start time). A claim succeeds only if the row is
absent, its heartbeat is older than ``recoverAfterSeconds``, or its owner is a process of this
machine that is gone (a ``kill -9``); every claim and takeover is a compare-and-set on the owner
token, so of two claimants racing exactly one wins.

Every live worker beats its own row (``… WHERE owner = token``; a beat that matches nothing
means someone took the id over: this process must stop being a worker) and looks for dead
executors: rows whose heartbeat is stale, or whose owner process on this machine is gone. Taking
over a dead executor for recovery is the same compare-and-set (the owner becomes
``recovering:<token>``), so exactly one worker resumes its turns; it removes the row afterwards.

The clock is the database's (``clock_timestamp()`` on Postgres), so workers on machines with
skewed clocks agree on who is stale.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError
from ._settings import DurableSettings

__all__ = [
    "Claimant",
    "ExecutorRow",
    "Heartbeats",
    "claim_executor_id",
    "preview_executor_id",
    "process_alive",
    "this_process",
]

_TABLE = "shipagent_executors"
_DDL_LOCK = 0x5A1D_DB05
"""Advisory lock key under which the table is created (any constant no one else uses)."""
_COLUMNS = ("owner", "proc")
"""Columns added after the first version of the table (``ALTER TABLE`` on an older database)."""
RECOVERING = "recovering:"
"""Owner prefix of a row a live worker took over to resume its turns."""


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or ''."""
    stat = _read(f"/proc/{pid}/stat")
    _, _, rest = stat.rpartition(")")  # the command name may hold spaces and parentheses
    fields = rest.split()
    return fields[19] if len(fields) > 19 else ""


def _where() -> str:
    """This machine boot and pid namespace: pids are comparable only between equal values.

    Empty where ``/proc`` cannot tell (not Linux): then a dead owner is found by its stale
    heartbeat only.
    """
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}|{namespace}" if boot else ""


def _use_wal(conn: sqlite3.Connection, *, attempts: int = 50) -> None:
    """Switch the file to WAL unless it is already (only the first worker on a new file does).

    Changing the journal mode needs the file to itself, and SQLite does not always wait for that
    with the busy timeout: workers starting together may each get ``SQLITE_BUSY`` once. They read
    the mode first (free once it is WAL) and retry the switch for a few seconds.
    """
    for attempt in range(attempts):
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY or attempt == attempts - 1:
                raise
            time.sleep(0.1)


@dataclass(frozen=True)
class Claimant:
    """One process that claims an executor id: who it is and how to tell it is gone."""

    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=lambda: socket.gethostname() or "localhost")
    proc: str = ""
    """``<boot id>|<pid namespace>|<start time>``: with the pid, names this process for good."""


def this_process(pid: int | None = None) -> Claimant:
    """The claimant for the running process (or process ``pid``); a fresh owner token each call."""
    pid = os.getpid() if pid is None else pid
    where = _where()
    started = _start_time(pid)
    return Claimant(pid=pid, proc=f"{where}|{started}" if where and started else "")


def process_alive(pid: int, proc: str) -> bool | None:
    """Whether the process a row names still runs: ``None`` when this machine cannot tell.

    Only a process of this boot and pid namespace can be checked; the start time guards against
    a pid the kernel handed to another process since.
    """
    where, _, started = proc.rpartition("|")
    if not where or where != _where() or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    return _start_time(pid) == started


@dataclass(frozen=True)
class ExecutorRow:
    """One executor's row: its id, owner and the age of its heartbeat in seconds."""

    executor_id: str
    owner: str
    pid: int
    host: str
    proc: str
    age: float

    def dead(self, stale_after: float) -> bool:
        """Stale heartbeat, or an owner process on this machine that is gone."""
        return self.age > stale_after or process_alive(self.pid, self.proc) is False


class Heartbeats:
    """The executor table of one durable database (blocking calls: run them in a thread)."""

    def __init__(self, settings: DurableSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._conn: Any = None

    # -- connection ------------------------------------------------------------------------------

    def _connect(self) -> Any:
        if self._conn is None:
            ddl = (
                f"CREATE TABLE IF NOT EXISTS {_TABLE} (executor_id TEXT PRIMARY KEY, "
                "heartbeat_at {real} NOT NULL, pid INTEGER, host TEXT, "
                "owner TEXT NOT NULL DEFAULT '', proc TEXT NOT NULL DEFAULT '')"
            )
            if self.settings.is_sqlite:
                path = self.settings.database_url.removeprefix("sqlite:///")
                conn: Any = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
                # WAL (a property of the file, so DBOS's connections use it too): a commit is one
                # append to the log instead of a rollback journal written, synced and deleted,
                # and readers do not block the writer. Committed data survives a killed process.
                _use_wal(conn)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(ddl.replace("{real}", "REAL"))
                    have = {row[1] for row in conn.execute(f"PRAGMA table_info({_TABLE})")}
                    for column in _COLUMNS:
                        if column not in have:
                            conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            else:
                import psycopg

                conn = psycopg.connect(self.settings.database_url, autocommit=True, connect_timeout=10)
                # Workers starting together would race ``CREATE TABLE IF NOT EXISTS`` (Postgres can
                # fail one with a duplicate pg_type key): serialise it on a transaction lock.
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                    conn.execute(ddl.replace("{real}", "DOUBLE PRECISION"))
                    have = {
                        row[0]
                        for row in conn.execute(
                            "SELECT column_name FROM information_schema.columns "
                            "WHERE table_name = %s AND table_schema = current_schema()",
                            (_TABLE,),
                        )
                    }
                    for column in _COLUMNS:  # ALTER locks the table: only when a column is missing
                        if column not in have:
                            conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
            self._conn = conn
        return self._conn

    def _now(self) -> str:
        if self.settings.is_sqlite:  # seconds since the epoch, to the millisecond
            return "((julianday('now') - 2440587.5) * 86400.0)"
        return "EXTRACT(EPOCH FROM clock_timestamp())"

    def _run(self, sql: str, params: tuple[Any, ...]) -> Any:
        """Execute ``sql`` with the database's clock for each ``{now}``."""
        text = sql.replace("{now}", self._now())
        if not self.settings.is_sqlite:
            text = text.replace("?", "%s")
        with self._lock:
            try:
                return self._connect().execute(text, params)
            except Exception:
                self.close()  # a broken connection is reopened on the next call
                raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a dead connection
                conn.close()

    # -- claiming an id --------------------------------------------------------------------------

    def row(self, executor_id: str) -> ExecutorRow | None:
        cursor = self._run(
            f"SELECT executor_id, owner, pid, host, proc, {{now}} - heartbeat_at FROM {_TABLE} "
            "WHERE executor_id = ?",
            (executor_id,),
        )
        found = cursor.fetchone()
        return _row(found) if found else None

    def rows(self) -> list[ExecutorRow]:
        """Every executor row, by id (for ``shipagent check`` and ``recover``)."""
        cursor = self._run(
            f"SELECT executor_id, owner, pid, host, proc, {{now}} - heartbeat_at FROM {_TABLE} "
            "ORDER BY executor_id",
            (),
        )
        return [_row(found) for found in cursor.fetchall()]

    def claim_id(self, executor_id: str, me: Claimant, stale_after: float) -> ExecutorRow | None:
        """Make ``me`` the owner of ``executor_id``; ``None`` when it did, else the live holder.

        Free means: no row, a stale heartbeat, or an owner process of this machine that is gone.
        """
        for _ in range(5):  # a lost race re-reads the row; more than a few means a live holder
            held = self.row(executor_id)
            if held is None:
                cursor = self._run(
                    f"INSERT INTO {_TABLE} (heartbeat_at, executor_id, owner, pid, host, proc) "
                    "VALUES ({now}, ?, ?, ?, ?, ?) ON CONFLICT (executor_id) DO NOTHING",
                    (executor_id, me.owner, me.pid, me.host, me.proc),
                )
            elif held.owner == me.owner or held.dead(stale_after):
                cursor = self._run(
                    f"UPDATE {_TABLE} SET heartbeat_at = {{now}}, owner = ?, pid = ?, host = ?, proc = ? "
                    "WHERE executor_id = ? AND owner = ?",
                    (me.owner, me.pid, me.host, me.proc, executor_id, held.owner),
                )
            else:
                return held
            if cursor.rowcount == 1:
                return None
        return self.row(executor_id) or ExecutorRow(executor_id, "", 0, "", "", 0.0)

    def beat(self, executor_id: str, owner: str) -> bool:
        """Record that ``executor_id`` is alive now; ``False``: the id is no longer this owner's."""
        cursor = self._run(
            f"UPDATE {_TABLE} SET heartbeat_at = {{now}} WHERE executor_id = ? AND owner = ?",
            (executor_id, owner),
        )
        return bool(cursor.rowcount == 1)

    def release(self, executor_id: str, owner: str) -> None:
        """A clean stop: the row goes stale at once, still ``owner``'s.

        Kept rather than deleted: a turn still pending on this id (one that outlived the stop's
        grace period) is resumed by a live worker at its next look, or by the next process to
        claim the id (which is free now).
        """
        self._run(
            f"UPDATE {_TABLE} SET heartbeat_at = 0 WHERE executor_id = ? AND owner = ?", (executor_id, owner)
        )

    # -- dead executors --------------------------------------------------------------------------

    def dead(self, me: str, stale_after: float) -> list[ExecutorRow]:
        """Executors other than ``me`` that are dead: stale heartbeat, or a gone local process."""
        return [row for row in self.rows() if row.executor_id != me and row.dead(stale_after)]

    def take_over(self, dead: ExecutorRow, me: Claimant, stale_after: float) -> bool:
        """Take ``dead`` over to resume its turns; of all callers exactly one wins.

        A compare-and-set on the owner token the caller saw (and, when the caller judged it by its
        heartbeat, on the heartbeat still being stale). The winner's row is fresh and names the
        winner (owner ``recovering:<token>``, its pid), so nobody else tries while it lives; the
        winner removes the row (:meth:`forget`) once the turns are back on the queue. A winner
        that dies in between leaves the row to be found dead again, and another worker finishes.
        """
        gone = process_alive(dead.pid, dead.proc) is False
        cursor = self._run(
            f"UPDATE {_TABLE} SET heartbeat_at = {{now}}, owner = ?, pid = ?, host = ?, proc = ? "
            "WHERE executor_id = ? AND owner = ?" + ("" if gone else " AND heartbeat_at < {now} - ?"),
            (
                RECOVERING + me.owner,
                me.pid,
                me.host,
                me.proc,
                dead.executor_id,
                dead.owner,
                *(() if gone else (stale_after,)),
            ),
        )
        return bool(cursor.rowcount == 1)

    def forget(self, executor_id: str, owner: str | None = None) -> None:
        """Remove an executor's row (only if ``owner`` still holds it, when given)."""
        if owner is None:
            self._run(f"DELETE FROM {_TABLE} WHERE executor_id = ?", (executor_id,))
        else:
            self._run(f"DELETE FROM {_TABLE} WHERE executor_id = ? AND owner = ?", (executor_id, owner))

    def ages(self) -> dict[str, float]:
        """Seconds since each executor's last heartbeat."""
        return {row.executor_id: row.age for row in self.rows()}


def _row(found: Any) -> ExecutorRow:
    executor_id, owner, pid, host, proc, age = found
    return ExecutorRow(executor_id, owner or "", int(pid or 0), host or "", proc or "", float(age))


MAX_SLOTS = 1024


def claim_executor_id(beats: Heartbeats, settings: DurableSettings, me: Claimant) -> str:
    """Claim this process's executor id in the database and return it.

    A configured id (``durable.executorId``, ``--executor-id``, ``SHIPAGENT_EXECUTOR_ID``) is
    taken if free and refused if a live process holds it: it names one worker on purpose (its
    restarts resume its turns), so a second one under it is a mistake to report, not to paper
    over. Otherwise the first free ``<hostname>:<n>``: a worker killed with ``kill -9`` frees its
    id at once, so its replacement on the same machine gets it back and resumes its turns.

    Raises:
        ConfigError: the configured id is held by a live worker, or every default id is.
    """
    after = settings.recover_after_seconds
    if settings.executor_id:
        held = beats.claim_id(settings.executor_id, me, after)
        if held is None:
            return settings.executor_id
        raise ConfigError(
            f"durable.executorId: the executor id {settings.executor_id!r} is held by a live worker "
            f"({_describe(held)}); two live workers under one id would leave a dead one's turns "
            "unresumed: give this worker another id (--executor-id, SHIPAGENT_EXECUTOR_ID) or "
            "leave it unset for <hostname>:<n>",
            path="durable.executorId",
        )
    for slot in range(MAX_SLOTS):
        candidate = f"{me.host}:{slot}"
        if beats.claim_id(candidate, me, after) is None:
            return candidate
    raise ConfigError(
        f"durable: all {MAX_SLOTS} executor ids {me.host}:0…{MAX_SLOTS - 1} are held by live workers",
        path="durable.executorId",
    )


def preview_executor_id(beats: Heartbeats, settings: DurableSettings, me: Claimant) -> tuple[str, str]:
    """The id :func:`claim_executor_id` would take now, without claiming: ``(id, note)``.

    ``note`` is empty when a worker would get that id, else why it would not start.
    """
    after = settings.recover_after_seconds
    rows = {row.executor_id: row for row in beats.rows()}
    if settings.executor_id:
        held = rows.get(settings.executor_id)
        if held is None or held.dead(after):
            return settings.executor_id, ""
        return (
            settings.executor_id,
            f"held by a live worker ({_describe(held)}): a second worker would refuse it",
        )
    for slot in range(MAX_SLOTS):
        candidate = f"{me.host}:{slot}"
        held = rows.get(candidate)
        if held is None or held.dead(after):
            return candidate, ""
    return f"{me.host}:?", "every default id is held by a live worker"


def _describe(row: ExecutorRow) -> str:
    return f"pid {row.pid} on {row.host or '?'}, last heartbeat {max(row.age, 0):.0f}s ago"
