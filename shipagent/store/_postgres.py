"""The stores on Postgres: every worker of a cluster reads and writes the same chats.

Tables are keyed by ``(chat_key, seq)`` and hold the very records the JSONL files hold (a
``json`` column keeps their text as written). Context file contents live in Postgres too, so a
file one worker spilled is readable by a worker on another machine. :meth:`PgStores.commit_turn`
writes a turn's history, transcript, agent-context entry and output-box cards in ONE transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from ._browse import ChatInfo, chats_by_activity
from ._context import ContextBase, sha256
from ._pg_base import PgPool, append_rows, dumps
from ._pg_cards import PgCardBoxStore, append_cards, named_box_in
from ._protocols import CommitReport, LogRecord, TurnRecord
from ._records import (
    AgentContextMixin,
    MessageLogMixin,
    RawLog,
    RecordChatStore,
    TranscriptMixin,
    agent_context_entry,
    agent_context_summary,
    history_file,
    message_records,
    transcript_records,
    turn_cards,
)

__all__ = ["PgStores"]


async def _records(conn: Any, table: str, chat_key: str, start: int, stop: int | None) -> list[LogRecord]:
    cur = await conn.execute(
        f"SELECT seq, record FROM shipagent.{table} WHERE chat_key = %s AND seq >= %s AND seq < %s ORDER BY seq",
        (chat_key, start, stop if stop is not None else 2**62),
    )
    return [LogRecord(int(seq), record) for seq, record in await cur.fetchall()]


async def _replace(conn: Any, table: str, chat_key: str, records: Sequence[dict[str, Any]]) -> None:
    await conn.execute(f"DELETE FROM shipagent.{table} WHERE chat_key = %s", (chat_key,))
    await append_rows(conn, table, chat_key, records)


async def _agent_context_append(conn: Any, chat_key: str, entry: dict[str, Any], window: int) -> None:
    """Append a run's entry; past the window, merge the oldest into one summary, all server-side.

    Only the rows merged into the summary come to Python; the kept ones are renumbered in place
    (to ``2..window``, the summary taking ``1``, as ``replace_all`` numbers them) instead of
    being read, decoded, deleted and inserted again on every turn of a long chat.
    """
    count = await append_rows(conn, "agent_context", chat_key, [entry])
    if count <= window:
        return
    cur = await conn.execute(
        "SELECT seq, record FROM shipagent.agent_context WHERE chat_key = %s ORDER BY seq LIMIT %s",
        (chat_key, count - (window - 1)),
    )
    older = await cur.fetchall()
    summary = agent_context_summary(chat_key, [record for _, record in older])
    await conn.execute(
        "DELETE FROM shipagent.agent_context WHERE chat_key = %s AND seq <= %s", (chat_key, older[-1][0])
    )
    # Two steps: a primary key is checked row by row, so shifting seqs down in one UPDATE could
    # collide with a row not moved yet; negative seqs are never used otherwise.
    await conn.execute(
        "UPDATE shipagent.agent_context a SET seq = -1 - r.n FROM (SELECT seq, row_number() OVER "
        "(ORDER BY seq) AS n FROM shipagent.agent_context WHERE chat_key = %s) r "
        "WHERE a.chat_key = %s AND a.seq = r.seq",
        (chat_key, chat_key),
    )
    await conn.execute("UPDATE shipagent.agent_context SET seq = -seq WHERE chat_key = %s", (chat_key,))
    await conn.execute(
        "INSERT INTO shipagent.agent_context VALUES (%s, 1, NULL, %s, %s::json)",
        (chat_key, rid if (rid := summary["requestId"]) and "\x00" not in rid else None, dumps(summary)),
    )


class _PgLog(RawLog):
    table = ""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def append_records(self, chat_key: str, records: Sequence[dict[str, Any]]) -> int:
        async with self._pool.connection() as conn, conn.transaction():
            return await append_rows(conn, self.table, chat_key, records)

    async def records(self, chat_key: str, start: int = 1, stop: int | None = None) -> list[LogRecord]:
        async with self._pool.connection() as conn:
            return await _records(conn, self.table, chat_key, start, stop)

    async def last(self, chat_key: str, count: int, *, skip: int = 0) -> list[dict[str, Any]]:
        if count <= 0:
            return []
        rows = await self._pool.fetch(
            f"SELECT record FROM shipagent.{self.table} WHERE chat_key = %s ORDER BY seq DESC LIMIT %s OFFSET %s",
            (chat_key, count, max(0, skip)),
        )
        return [row[0] for row in reversed(rows)]

    async def count(self, chat_key: str) -> int:
        query = f"SELECT coalesce(max(seq), 0) FROM shipagent.{self.table} WHERE chat_key = %s"
        return int((await self._pool.fetch(query, (chat_key,)))[0][0])

    async def chat_keys(self) -> list[str]:
        rows = await self._pool.fetch(f"SELECT DISTINCT chat_key FROM shipagent.{self.table}")
        return sorted(row[0] for row in rows)  # Python's order, not the collation's

    async def replace_all(self, chat_key: str, records: Sequence[dict[str, Any]]) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            await _replace(conn, self.table, chat_key, records)


class PgMessageLog(MessageLogMixin, _PgLog):
    """``shipagent.messages``: turn and compaction records per chat."""

    table = "messages"

    async def last_compaction(self, chat_key: str) -> int:
        query = (
            "SELECT coalesce(max(seq), 0) FROM shipagent.messages WHERE chat_key = %s AND kind = 'compaction'"
        )
        return int((await self._pool.fetch(query, (chat_key,)))[0][0])


class PgTranscript(TranscriptMixin, _PgLog):
    """``shipagent.transcript``: one row per utterance."""

    table = "transcript"


class PgAgentContext(AgentContextMixin, _PgLog):
    """``shipagent.agent_context``: one row per run, windowed in the same transaction as the append."""

    table = "agent_context"

    def __init__(self, pool: PgPool, *, window: int = 200) -> None:
        super().__init__(pool)
        self.window = window

    async def append(
        self, chat_key: str, request_id: str, user_text: str, output: str, tool_calls: list[dict[str, Any]]
    ) -> None:
        entry = agent_context_entry(chat_key, request_id, user_text, output, tool_calls)
        async with self._pool.connection() as conn, conn.transaction():
            await _agent_context_append(conn, chat_key, entry, self.window)


class PgContextFiles(ContextBase):
    """``shipagent.context_index`` (the refs, a log) and ``shipagent.context_content`` (the bytes)."""

    def __init__(self, pool: PgPool, cache_dir: Path | None = None) -> None:
        super().__init__(cache_dir)
        self._pool = pool

    async def _append(self, chat_key: str, record: dict[str, Any], content: bytes | None) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            if content is not None:
                await conn.execute(
                    """INSERT INTO shipagent.context_content VALUES (%s, %s, %s, %s)
                    ON CONFLICT (chat_key, ref_id) DO UPDATE SET sha256 = EXCLUDED.sha256, content = EXCLUDED.content""",
                    (chat_key, str(record["id"]), sha256(content), content),
                )
            await append_rows(conn, "context_index", chat_key, [record])

    async def index(self, chat_key: str) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            return [r.data for r in await _records(conn, "context_index", chat_key, 1, None)]

    async def index_after(self, chat_key: str, seq: int) -> list[LogRecord]:
        """Index records with a seq above ``seq``, oldest first (what a worker has not seen yet)."""
        async with self._pool.connection() as conn:
            return await _records(conn, "context_index", chat_key, seq + 1, None)

    async def _content(self, chat_key: str, ref_id: str, column: str) -> Any:
        """Column ``content`` or ``sha256`` of ``ref_id``'s row (``None``: no row)."""
        query = f"SELECT {column} FROM shipagent.context_content WHERE chat_key = %s AND ref_id = %s"
        rows = await self._pool.fetch(query, (chat_key, ref_id))
        return rows[0][0] if rows else None

    async def stored(self, chat_key: str, ref_id: str) -> bytes | None:
        """The bytes kept for ``ref_id`` (``None``: none), without reading the index."""
        data = await self._content(chat_key, ref_id, "content")
        return None if data is None else bytes(data)

    async def _digest(self, chat_key: str, ref_id: str) -> str | None:
        digest = await self._content(chat_key, ref_id, "sha256")
        return None if digest is None else str(digest)

    async def _bytes(self, chat_key: str, ref_id: str) -> bytes:
        return await self.stored(chat_key, ref_id) or b""

    async def chat_keys(self) -> list[str]:
        return sorted(
            row[0] for row in await self._pool.fetch("SELECT DISTINCT chat_key FROM shipagent.context_index")
        )


class PgStores(RecordChatStore):
    """Every store of a project on one Postgres database (``postgresql://…``).

    Args:
        url: the database (the same one ship.json ``durable.database`` names is fine: DBOS keeps
            to its own schema).
        window: the agent-context window.
        project_id: the card store's project id (the agent uses ship.json ``name``).
        pool_size: connections kept open by this process.
    """

    def __init__(
        self, url: str, *, window: int = 200, project_id: str = "default", pool_size: int = 4
    ) -> None:
        self.pool = PgPool(url, size=pool_size)
        self.messages = PgMessageLog(self.pool)
        self.transcript = PgTranscript(self.pool)
        self.agent_context = PgAgentContext(self.pool, window=window)
        self.context_files = PgContextFiles(self.pool)
        self.cards = PgCardBoxStore(self.pool, project_id=project_id)
        self.before_commit: Callable[[Any], Awaitable[None]] | None = None
        """Test seam: awaited with the connection inside the transaction, just before COMMIT."""

    async def commit(self, record: TurnRecord) -> CommitReport:
        """The whole turn in one transaction: history, transcript, agent context, output-box cards.

        Idempotent by request id: a turn already committed writes nothing. The ``history``
        context files of its compactions follow the transaction (their ids come from the
        request id, so a re-commit writes the ones still missing).
        """
        key, rid = record.chat_key, record.request_id
        report = CommitReport()
        said = transcript_records(
            key, rid, record.user_text, record.transcript_answer, record.sent, sender=record.sender
        )
        entry = agent_context_entry(key, rid, record.user_text, record.output, record.tool_calls)
        cards = turn_cards(key, rid, record.user_text, record.output) if record.spoken else []
        # pipeline mode: statements whose results are not read go out without waiting for the
        # server, so the ~16 statements cost a handful of round trips instead of one each
        async with self.pool.connection() as conn, conn.pipeline(), conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"messages\x1f{key}",)
            )
            cur = await conn.execute(
                "SELECT 1 FROM shipagent.messages WHERE chat_key = %s AND request_id = %s AND kind = 'turn'",
                (key, rid),
            )
            held = await cur.fetchone() is not None
            if not held:  # else committed already, whole (one transaction): a replay writes nothing
                self._fault("messages")
                await append_rows(conn, "messages", key, message_records(record))
                self._fault("transcript")
                if record.spoken:
                    await append_rows(conn, "transcript", key, said)
                self._fault("agentContext")
                if record.spoken:
                    await _agent_context_append(conn, key, entry, self.agent_context.window)
                self._fault("cards")
                if cards:
                    box = await named_box_in(conn, self.cards.project_id, f"output:{key}")
                    report.card_ids = await append_cards(conn, box, cards)
                if self.before_commit is not None:
                    await self.before_commit(conn)
                report.written.extend(["messages", "transcript", "agentContext", "cards"])
        try:
            for n, removed in enumerate(record.removed):
                ref, data = history_file(key, rid, n, removed)
                if removed and await self.context_files.stored(key, ref.id) is None:
                    self._fault("history")
                    await self.context_files.put(key, ref, data)
                    report.written.append("history")
        except Exception as exc:  # the turn is committed; the next commit of it writes the file
            report.failed["history"] = exc
        if record.ledger is not None and not held:  # the ledger is this machine's: its .ship/ files
            await anyio.to_thread.run_sync(record.ledger)
            report.written.append("ledger")
        return report

    async def list_chats(self) -> list[ChatInfo]:
        """Every chat in the database, newest first: one query over the newest record of each."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT k.chat_key, greatest(
                    (SELECT t.record->>'ts' FROM shipagent.transcript t
                      WHERE t.chat_key = k.chat_key ORDER BY t.seq DESC LIMIT 1),
                    (SELECT m.record->>'ts' FROM shipagent.messages m
                      WHERE m.chat_key = k.chat_key ORDER BY m.seq DESC LIMIT 1))
                FROM (SELECT DISTINCT chat_key FROM shipagent.transcript
                      UNION SELECT DISTINCT chat_key FROM shipagent.messages) k"""
            )
            return chats_by_activity([(str(key), str(ts or "")) for key, ts in await cur.fetchall()])

    async def close(self) -> None:
        await self.pool.close()
