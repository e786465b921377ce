"""The Postgres ChatStore of a durable cluster, with the blocking reads the sync APIs need.

:class:`PgClusterStore` is :class:`~shipagent.store.PgStores` (the turn's async reads and its
one-transaction commit) plus the sync side of the same chats — ``history_sync``,
``message_log_sync``, the context files and the card store — through the process's
:class:`~shipagent.store._bridge.PgBridge`. The bridge stays behind this backend: the agent
asks its store, whichever it is, and the files backend answers the same calls from ``.ship/``.

When ship.json says ``durable`` on a ``postgresql://`` database, the chats live in Postgres and
each machine's ``.ship/`` holds none of them; serve lists them with :meth:`PgStores.list_chats`.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage

from ..chatkeys import ShipPaths
from ._bridge import PgBridge
from ._postgres import PgStores
from ._record import CachedChats
from ._records import records_log
from .cards import CardBoxStore
from .files import ContextFiles
from .logs import MessageLog

if TYPE_CHECKING:
    from ._shared_cards import SharedCardBoxStore
    from ._shared_files import SharedContextFiles

__all__ = ["PgClusterStore"]


class PgClusterStore(PgStores):
    """A cluster's chats on Postgres: the async store and its bridged sync reads.

    The sync reads serve callers that cannot await (``ShipAgent.history``/``expand``/
    ``reconstruct``, the sync context-files API the tools and CLIs use, handover's cards from any
    event loop). They work from any thread and from code with no event loop; the turn's own
    reads and writes are async and need no bridge.

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

    @cached_property
    def bridge(self) -> PgBridge:
        """The blocking side's way in, made on first use (one bridge per database per process)."""
        return PgBridge.for_url(self.url)

    @cached_property
    def _files_sync(self) -> SharedContextFiles:
        from ._shared_files import SharedContextFiles

        return SharedContextFiles(self.paths, self.bridge)

    @cached_property
    def _cards_sync(self) -> SharedCardBoxStore:
        from ._shared_cards import SharedCardBoxStore

        return SharedCardBoxStore(self.bridge, project_id=self.cards.project_id)

    def history_sync(self, chat_key: str, chats: CachedChats) -> list[ModelMessage]:
        """The chat as the last turn committed it, whichever worker did (never this process's copy)."""
        return self.bridge.call(lambda s: s.messages.rebuild(chat_key))

    def message_log_sync(self, chat_key: str) -> MessageLog:
        """The chat's message log, read now (``expand``, ``reconstruct``, ``context_expand``)."""
        records = self.bridge.call(lambda s: s.messages.records(chat_key))
        return records_log(chat_key, [r.data for r in records])

    def sync_context_files(self) -> ContextFiles:
        """The context files every worker reads and writes (the tools' sync API)."""
        return self._files_sync

    def turn_card_store(self) -> CardBoxStore | None:
        """Handover's cards and boxes: the rows the commits write output boxes to."""
        return self._cards_sync
