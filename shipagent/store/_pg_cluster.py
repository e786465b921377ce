"""The Postgres ChatStore of a durable cluster, and the sync reads its public API still offers.

:class:`PgClusterStore` is :class:`~shipagent.store.PgStores` (the turn's async reads and its
one-transaction commit) plus what the agent asks every store for: the chat's history and message
log outside a turn, the context files and the card store. Async callers await them on their own
loop (the pool keeps connections per loop); ``history_sync`` and ``message_log_sync`` serve
``ShipAgent.history``/``expand``/``reconstruct`` through :func:`~shipagent.store._pg_sync.blocking`
— from a worker thread or code with no loop, never on a running loop's thread.

When ship.json says ``durable`` on a ``postgresql://`` database, the chats live in Postgres and
each machine's ``.ship/`` holds none of them; serve lists them with :meth:`PgStores.list_chats`.
"""

from __future__ import annotations

from functools import cached_property

from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ._pg_files import ClusterContextFiles
from ._pg_sync import blocking, pg_errors
from ._postgres import PgStores
from ._record import CachedChats
from .cards import CardBoxStore
from .files import ContextFiles
from .logs import MessageLog

__all__ = ["PgClusterStore"]


class PgClusterStore(PgStores):
    """A cluster's chats on Postgres: the async store and the sync reads of its public API.

    Args:
        url: the database (ship.json ``durable.database``).
        paths: the project's paths (where fetched context files are cached on this machine).
    """

    def __init__(
        self,
        url: str,
        *,
        window: int = 200,
        project_id: str = "default",
        paths: ShipPaths,
        pool_size: int = 4,
    ) -> None:
        super().__init__(url, window=window, project_id=project_id, pool_size=pool_size)
        self.paths = paths

    @cached_property
    def _files(self) -> ClusterContextFiles:
        return ClusterContextFiles(self.paths, self)

    async def history_async(self, chat_key: str, chats: CachedChats) -> list[ModelMessage]:
        """The chat as the last turn committed it, whichever worker did (never this process's copy)."""
        with pg_errors(self.pool.url):
            messages: list[ModelMessage] = await self.messages.rebuild(chat_key)
        return messages

    async def message_log_async(self, chat_key: str) -> MessageLog:
        """The chat's message log, read now (``expand``, ``reconstruct``, ``context_expand``)."""
        with pg_errors(self.pool.url):
            return await self._log(chat_key)

    def history_sync(self, chat_key: str, chats: CachedChats) -> list[ModelMessage]:
        """:meth:`history_async` for a caller that cannot await (see :func:`blocking`)."""
        return blocking(self.pool, lambda: self.messages.rebuild(chat_key), instead="ShipAgent.ahistory()")

    def message_log_sync(self, chat_key: str) -> MessageLog:
        """:meth:`message_log_async` for a caller that cannot await (see :func:`blocking`)."""
        instead = "ShipAgent.aexpand() or ShipAgent.areconstruct()"
        return blocking(self.pool, lambda: self._log(chat_key), instead=instead)

    def sync_context_files(self) -> ContextFiles:
        """The context files every worker reads and writes (the tools' API)."""
        return self._files

    def turn_card_store(self) -> CardBoxStore | None:
        """Handover's cards and boxes: the rows the commits write output boxes to (this pool's)."""
        return self.cards
