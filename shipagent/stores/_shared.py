"""A durable cluster's chats as one process sees them outside its turns.

When ship.json says ``durable`` on a ``postgresql://`` database, the chats live in Postgres and
each machine's ``.ship/`` holds none of them. :class:`SharedChats` is what the agent consults
then (``ShipAgent.shared``): the context files (:class:`SharedContextFiles`), the history of a
chat this process never ran (:meth:`history`), its message log for ``expand`` and
``reconstruct`` (:meth:`message_log`), ``/clear`` (:meth:`clear`) and the ``chat_send`` lines of
a turn that did not commit (:meth:`keep_sent`), and handover's cards and boxes (:attr:`cards`,
a :class:`SharedCardBoxStore`). Serve lists the cluster's chats with :func:`chat_activity`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ..config import ShipConfig
from ..errors import ShipAgentError
from ..history.stores import MessageLog, load_messages
from ._bridge import PgBridge
from ._postgres import PgStores
from ._records import compaction_record
from ._select import is_postgres
from ._shared_cards import SharedCardBoxStore
from ._shared_files import SharedContextFiles

__all__ = ["RecordsMessageLog", "SharedChats", "chat_activity", "load_numbered", "shared_chats"]

log = logging.getLogger("shipagent.stores")


class RecordsMessageLog(MessageLog):
    """A :class:`MessageLog` over records already read from another store (one chat's)."""

    def __init__(self, paths: ShipPaths, chat_key: str, records: Sequence[dict[str, Any]]) -> None:
        super().__init__(paths)
        self.chat_key = chat_key
        self._records = list(records)

    def records_backward(self, chat_key: str) -> Iterator[Any]:
        return iter(self.records_forward(chat_key)[::-1])

    def records_forward(self, chat_key: str) -> list[Any]:
        return list(self._records) if chat_key == self.chat_key else []


def _unnumbered(records: Sequence[dict[str, Any]]) -> bool:
    """Whether records from the last compaction on lack seqs (written before they were numbered)."""
    if records and records[0].get("t") == "compaction" and "sources" not in records[0]:
        return True
    return any(r.get("t") == "turn" and not isinstance(r.get("seq"), int) for r in records)


async def load_numbered(
    stores: PgStores, paths: ShipPaths, chat_key: str
) -> tuple[list[ModelMessage], list[str], int]:
    """The chat's history, each message's source and the next seq, as the message log file gives them.

    Reads from the newest compaction on (the whole log only when older records carry no seqs),
    so a worker names messages ``history:<seq>`` like a plain agent does, and compaction
    summaries get ids that ``context_expand`` and ``agent.expand`` resolve on every machine.
    """
    start = await stores.messages.last_compaction(chat_key)
    records = [r.data for r in await stores.messages.records(chat_key, max(1, start))]
    if start > 1 and _unnumbered(records):
        records = [r.data for r in await stores.messages.records(chat_key)]
    history: list[ModelMessage] = []
    for record in records:
        if record.get("t") == "compaction":
            history = load_messages(record["history"])
        elif record.get("t") == "turn":
            history.extend(load_messages(record["messages"]))
    sources, next_seq = RecordsMessageLog(paths, chat_key, records).sources(chat_key)
    return history, sources, next_seq


class SharedChats:
    """The chats of a project whose durable workers share one Postgres database.

    Synchronous reads go through the process's :class:`PgBridge`, so they work from any thread
    (and from code with no event loop); async writes await it without a thread hop.
    """

    def __init__(self, paths: ShipPaths, bridge: PgBridge, *, project_id: str = "default") -> None:
        self.paths = paths
        self.bridge = bridge
        self.context_files = SharedContextFiles(paths, bridge)
        self.cards = SharedCardBoxStore(bridge, project_id=project_id)
        """Handover's store: the rows the workers' commits write output-box cards to."""

    def history(self, chat_key: str) -> list[ModelMessage]:
        """The chat's history after its last committed turn (whichever worker committed it)."""
        return self.bridge.call(lambda s: s.messages.rebuild(chat_key))

    def message_log(self, chat_key: str) -> MessageLog:
        """The chat's message log, read now, for ``MessageLog.expand`` / ``find``."""
        records = self.bridge.call(lambda s: s.messages.records(chat_key))
        return RecordsMessageLog(self.paths, chat_key, [r.data for r in records])

    async def clear(self, chat_key: str, request_id: str) -> None:
        """An empty compaction record: every worker's next turn of the chat starts afresh."""

        async def write(stores: PgStores) -> None:
            _, _, next_seq = await load_numbered(stores, self.paths, chat_key)  # seqs go on after it
            await stores.messages.append_records(chat_key, [compaction_record(request_id, [], [], next_seq)])

        await self.bridge.acall(write)

    async def keep_sent(self, chat_key: str, request_id: str, text: str, sent: Sequence[str]) -> None:
        """Transcript lines of a turn that did not commit: the user and what ``chat_send`` said.

        Once per request id: a resumed durable turn that fails again writes nothing twice.
        """

        async def write(stores: PgStores) -> None:
            if not await stores.transcript.holds(chat_key, request_id, scan=64):
                await stores.transcript.append_turn(chat_key, request_id, text, "", sent=sent)

        try:
            await self.bridge.acall(write)
        except ShipAgentError as exc:  # the turn failed already: say so, do not fail it differently
            log.error("chat %r: could not keep turn %s's chat_send lines: %s", chat_key, request_id, exc)


def shared_chats(project_root: Path, config: ShipConfig) -> SharedChats | None:
    """The project's :class:`SharedChats` when its durable database is Postgres, else ``None``."""
    if not (config.durable.enabled and is_postgres(config.durable.database)):
        return None
    bridge = PgBridge.for_url(config.durable.database)
    return SharedChats(ShipPaths(project_root), bridge, project_id=config.name)


async def chat_activity(stores: PgStores) -> list[tuple[str, str]]:
    """``(chat key, time of its newest transcript or message record)`` of every chat in the database."""
    async with stores.pool.connection() as conn:
        cur = await conn.execute(
            """SELECT k.chat_key, greatest(
                (SELECT t.record->>'ts' FROM shipagent.transcript t
                  WHERE t.chat_key = k.chat_key ORDER BY t.seq DESC LIMIT 1),
                (SELECT m.record->>'ts' FROM shipagent.messages m
                  WHERE m.chat_key = k.chat_key ORDER BY m.seq DESC LIMIT 1))
            FROM (SELECT DISTINCT chat_key FROM shipagent.transcript
                  UNION SELECT DISTINCT chat_key FROM shipagent.messages) k"""
        )
        return [(str(key), str(ts or "")) for key, ts in await cur.fetchall()]
