"""Postgres plumbing for the stores: a small connection pool and the idempotent schema.

Everything lives in the ``shipagent`` schema of the database (DBOS keeps its own ``dbos``
schema, so one database serves both). The schema is created with ``CREATE … IF NOT EXISTS``
under an advisory lock, so any number of workers may start at once; a ``schema_version`` row
says which layout the database holds and a newer one than this code knows is refused.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..errors import ShipAgentError

__all__ = ["SCHEMA_VERSION", "PgPool", "append_rows", "dumps", "redact"]

SCHEMA_VERSION = 1
_LOGS = ("messages", "transcript", "agent_context", "context_index")
_SCHEMA_LOCK = 0x5A1_9E57  # pg_advisory_xact_lock key for creating the schema
_DDL = [
    "CREATE SCHEMA IF NOT EXISTS shipagent",
    """CREATE TABLE IF NOT EXISTS shipagent.schema_version (
        id int PRIMARY KEY CHECK (id = 1), version int NOT NULL)""",
    *(
        f"""CREATE TABLE IF NOT EXISTS shipagent.{table} (
        chat_key text NOT NULL, seq bigint NOT NULL, kind text, request_id text,
        record json NOT NULL, PRIMARY KEY (chat_key, seq))"""
        for table in _LOGS
    ),
    "CREATE INDEX IF NOT EXISTS messages_request ON shipagent.messages (chat_key, request_id)",
    """CREATE TABLE IF NOT EXISTS shipagent.context_content (
        chat_key text NOT NULL, ref_id text NOT NULL, sha256 text NOT NULL, content bytea NOT NULL,
        PRIMARY KEY (chat_key, ref_id))""",
    """CREATE TABLE IF NOT EXISTS shipagent.cards (
        card_id text PRIMARY KEY, project_id text NOT NULL, type text NOT NULL, content text NOT NULL,
        author_id text NOT NULL, metadata text NOT NULL, created_at text NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS shipagent.boxes (
        box_id text PRIMARY KEY, project_id text NOT NULL, created_at text NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS shipagent.box_cards (
        box_id text NOT NULL REFERENCES shipagent.boxes(box_id), position int NOT NULL,
        card_id text NOT NULL REFERENCES shipagent.cards(card_id), PRIMARY KEY (box_id, position))""",
    """CREATE TABLE IF NOT EXISTS shipagent.named_boxes (
        project_id text NOT NULL, name text NOT NULL,
        box_id text NOT NULL REFERENCES shipagent.boxes(box_id), PRIMARY KEY (project_id, name))""",
]


def dumps(value: Any) -> str:
    """The JSON text of a record: compact and UTF-8, as the JSONL files write it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def is_postgres(database: str) -> bool:
    """Whether ship.json ``durable.database`` names a Postgres server (else SQLite)."""
    return database.startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redact(url: str) -> str:
    """``url`` without its password, in the user part or as ``?password=`` (for messages and logs)."""
    head, at, tail = url.rpartition("@")
    if at and "://" in head:
        scheme, _, userinfo = head.partition("://")
        if ":" in userinfo:
            url = f"{scheme}://{userinfo.split(':', 1)[0]}:***@{tail}"
    return _QUERY_PASSWORD.sub(r"\1***", url)


@dataclass
class _LoopConns:
    """One event loop's share of a pool: its idle connections and its slots."""

    size: int
    idle: list[Any] = field(default_factory=list)
    slots: anyio.Semaphore = field(init=False)
    schema_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.slots = anyio.Semaphore(self.size)


class PgPool:
    """A few psycopg 3 async connections reused across calls (autocommit; transactions explicit).

    A connection that fails or is left inside a transaction is closed rather than reused, so a
    killed backend never poisons later calls.

    A psycopg connection belongs to the event loop that opened it, and one agent is driven from
    more than one loop (a worker's, serve's, a CLI's ``anyio.run`` per command, a sync caller's
    :func:`asyncio.run`). So the pool keeps its connections per loop, made lazily on the loop
    that asks: each loop reuses its own, at most ``size`` at a time, and never touches another
    loop's. A caller that runs a loop of its own for one call (:func:`~shipagent.store._pg_sync.blocking`)
    closes its share before that loop ends (:meth:`release`); the share of any other loop that has
    ended (``ShipAgent.run_sync``'s, a CLI command's) is dropped when the next loop asks.
    """

    def __init__(self, url: str, *, size: int = 4) -> None:
        self.url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        self._size = size
        self._loops: dict[asyncio.AbstractEventLoop, _LoopConns] = {}
        self._loops_lock = threading.Lock()
        self._schema_ready = False

    def _here(self) -> _LoopConns:
        """This loop's connections (made on its first call)."""
        loop = asyncio.get_running_loop()
        with self._loops_lock:
            conns = self._loops.get(loop)
            if conns is None:
                for ended in [other for other in self._loops if other.is_closed()]:
                    del self._loops[ended]  # its idle connections are dropped (and closed as they go)
                conns = self._loops[loop] = _LoopConns(self._size)
            return conns

    async def _connect(self) -> Any:
        import psycopg

        try:
            return await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        except psycopg.OperationalError as exc:
            message = str(exc).replace(self.url, redact(self.url))
            raise ShipAgentError(f"cannot connect to Postgres at {redact(self.url)}: {message}") from None

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A connection for one call; the schema exists by the time it is handed out."""
        from psycopg.pq import TransactionStatus

        await self.ensure_schema()
        here = self._here()
        async with here.slots:
            conn = here.idle.pop() if here.idle else await self._connect()
            healthy = False
            try:
                yield conn
                healthy = True
            finally:
                if healthy and not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
                    here.idle.append(conn)
                else:
                    await conn.close()

    async def fetch(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read-only statement, on a connection of its own."""
        async with self.connection() as conn:
            cur = await conn.execute(query, params)
            rows: list[tuple[Any, ...]] = await cur.fetchall()
            return rows

    async def ensure_schema(self) -> None:
        if self._schema_ready:
            return
        async with self._here().schema_lock:
            if self._schema_ready:
                return
            conn = await self._connect()
            try:
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                    for statement in _DDL:
                        await conn.execute(statement)
                    await conn.execute(
                        "INSERT INTO shipagent.schema_version VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
                        (SCHEMA_VERSION,),
                    )
                    row = await (
                        await conn.execute("SELECT version FROM shipagent.schema_version")
                    ).fetchone()
                if row is None or row[0] > SCHEMA_VERSION:
                    raise ShipAgentError(
                        f"Postgres at {redact(self.url)} holds shipagent schema version {row and row[0]}; "
                        f"this shipagent knows version {SCHEMA_VERSION}: upgrade shipagent"
                    )
            finally:
                await conn.close()
            self._schema_ready = True

    async def release(self) -> None:
        """Close this loop's idle connections and forget its share (before the loop ends)."""
        with self._loops_lock:
            conns = self._loops.pop(asyncio.get_running_loop(), None)
        for conn in conns.idle if conns is not None else ():
            await conn.close()

    async def close(self) -> None:
        """Close this loop's idle connections (another loop's are its own: they go with it).

        The pool stays usable: a later call opens connections again.
        """
        await self.release()


async def append_rows(conn: Any, table: str, chat_key: str, records: Sequence[dict[str, Any]]) -> int:
    """Append ``records`` to ``shipagent.<table>`` for ``chat_key`` inside the caller's transaction.

    Seqs are allocated under a transaction-scoped advisory lock on (table, chat key), so two
    workers appending to one chat queue up instead of colliding on the primary key.
    """
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{table}\x1f{chat_key}",))
    cur = await conn.execute(
        f"SELECT coalesce(max(seq), 0) FROM shipagent.{table} WHERE chat_key = %s", (chat_key,)
    )
    (last,) = await cur.fetchone()
    rows = []
    for offset, record in enumerate(records, start=1):
        kind = (
            record.get("t") if table == "messages" else record.get("id") if table == "context_index" else None
        )
        request_id = record.get("requestId")
        rows.append(
            (
                chat_key,
                last + offset,
                kind,
                request_id if isinstance(request_id, str) and "\x00" not in request_id else None,
                dumps(record),
            )
        )
    if rows:
        async with conn.cursor() as cur:
            await cur.executemany(f"INSERT INTO shipagent.{table} VALUES (%s, %s, %s, %s, %s::json)", rows)
    return int(last) + len(rows)
