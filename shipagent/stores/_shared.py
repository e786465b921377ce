"""A durable cluster's chats for callers that cannot await, and serve's list of them.

When ship.json says ``durable`` on a ``postgresql://`` database, the chats live in Postgres and
each machine's ``.ship/`` holds none of them. The turn reads and writes them through the async
:class:`~shipagent.stores.PgStores`; :class:`PgSyncReads` is the blocking side the Postgres
backend (:class:`~shipagent.stores._pg_cluster.PgClusterStore`) keeps for the sync APIs: the
history of a chat (``ShipAgent.history``), its message log for ``expand`` and ``reconstruct``,
the context files (:class:`SharedContextFiles`) and handover's cards and boxes
(:class:`SharedCardBoxStore`). Serve lists the cluster's chats with :func:`chat_activity`.
"""

from __future__ import annotations

import logging

from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ..history.logs import MessageLog
from ._bridge import PgBridge
from ._postgres import PgStores
from ._records import records_log
from ._shared_cards import SharedCardBoxStore
from ._shared_files import SharedContextFiles

__all__ = ["PgSyncReads", "chat_activity"]

log = logging.getLogger("shipagent.stores")


class PgSyncReads:
    """The synchronous reads of a cluster's chats, through the process's :class:`PgBridge`.

    What a Postgres :class:`~shipagent.stores.ChatStore` offers callers that cannot await
    (``ShipAgent.history``/``expand``/``reconstruct``, the sync context-files API the tools and
    CLIs use, handover's cards from any event loop). They work from any thread and from code
    with no event loop; the turn's own reads and writes are async and need no bridge.
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
        return records_log(chat_key, [r.data for r in records])


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
