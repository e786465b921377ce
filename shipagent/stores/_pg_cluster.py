"""The Postgres ChatStore of a durable cluster, with the blocking reads the sync APIs need.

:class:`PgClusterStore` is :class:`~shipagent.stores.PgStores` (the turn's async reads and its
one-transaction commit) plus the sync side of the same chats — ``history_sync``,
``message_log_sync``, the context files and the card store — through the process's
:class:`~shipagent.stores._bridge.PgBridge`. The bridge stays behind this backend: the agent
asks its store, whichever it is, and the files backend answers the same calls from ``.ship/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ..files import ContextFiles
from ..handover import CardBoxStore
from ..history.logs import MessageLog
from ._bridge import PgBridge
from ._postgres import PgStores
from ._record import CachedChats

if TYPE_CHECKING:
    from ._shared import PgSyncReads

__all__ = ["PgClusterStore"]


class PgClusterStore(PgStores):
    """A cluster's chats on Postgres: the async store and its bridged sync reads.

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
        self.url = url
        self._sync: PgSyncReads | None = None

    def sync_reads(self) -> PgSyncReads:
        """The blocking side, made on first use (one bridge per database per process)."""
        if self._sync is None:
            from ._shared import PgSyncReads

            self._sync = PgSyncReads(self.paths, PgBridge.for_url(self.url), project_id=self.cards.project_id)
        return self._sync

    def history_sync(self, chat_key: str, chats: CachedChats) -> list[ModelMessage]:
        """The chat as the last turn committed it, whichever worker did (never this process's copy)."""
        return self.sync_reads().history(chat_key)

    def message_log_sync(self, chat_key: str) -> MessageLog:
        """The chat's message log, read now (``expand``, ``reconstruct``, ``context_expand``)."""
        return self.sync_reads().message_log(chat_key)

    def sync_context_files(self) -> ContextFiles:
        """The context files every worker reads and writes (the tools' sync API)."""
        return self.sync_reads().context_files

    def turn_card_store(self) -> CardBoxStore | None:
        """Handover's cards and boxes: the rows the commits write output boxes to."""
        return self.sync_reads().cards
