"""A durable cluster's cards and boxes: handover reads and writes the database, not ``.ship/``.

A worker's turn commit (:meth:`PgStores.commit_turn`) writes the chat's output-box cards to
Postgres. Handover — delegation's context boxes, profile boxes, a chat's output box another chat
inherits — must read and write the same rows, or a chat on machine B never sees the box machine
A's commit filled. :class:`SharedCardBoxStore` is the agent's :class:`CardBoxStore` then.

Why through :class:`PgBridge` although the handover API is async: one agent is driven from more
than one event loop (a worker's loop, serve's, a CLI's ``anyio.run`` per command, a test's), and a
pool's connections and locks belong to the loop that made them. The bridge's loop owns the one
pool; an async caller awaits the bridge's future (no thread hop), so any loop may call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ._bridge import PgBridge
from ._pg_cards import PgCardBoxStore
from ._postgres import PgStores
from .cards import Box, BoxId, Card, CardContent, NewCard

__all__ = ["SharedCardBoxStore"]

_T = TypeVar("_T")


class SharedCardBoxStore:
    """:class:`~shipagent.tools.handover.CardBoxStore` on a cluster's Postgres, reached through the bridge.

    Args:
        bridge: the process's bridge to the cluster's database.
        project_id: ship.json ``name``, as the workers' commits use it (output boxes are named
            per project, so both must agree for a handover to find a commit's box).
    """

    def __init__(self, bridge: PgBridge, *, project_id: str = "default") -> None:
        self.bridge = bridge
        self._project_id = project_id

    @property
    def project_id(self) -> str:
        return self._project_id

    async def _on(self, fn: Callable[[PgCardBoxStore], Awaitable[_T]]) -> _T:
        def run(stores: PgStores) -> Awaitable[_T]:  # a view on the bridge's pool: no I/O to build
            return fn(PgCardBoxStore(stores.pool, project_id=self._project_id))

        return await self.bridge.acall(run)

    async def add_card(
        self,
        *,
        type: str,
        content: CardContent | str | dict[str, Any] | list[Any],
        author_id: str,
        metadata: dict[str, Any] | None = None,
        project_id: str | None = None,
    ) -> str:
        return await self._on(
            lambda s: s.add_card(
                type=type, content=content, author_id=author_id, metadata=metadata, project_id=project_id
            )
        )

    async def get_card(self, card_id: str) -> Card:
        return await self._on(lambda s: s.get_card(card_id))

    async def get_cards(self, card_ids: Sequence[str]) -> list[Card]:
        return await self._on(lambda s: s.get_cards(card_ids))

    async def create_box(self, card_ids: Sequence[str], project_id: str | None = None) -> str:
        return await self._on(lambda s: s.create_box(card_ids, project_id))

    async def create_box_with(
        self, entries: Sequence[str | NewCard], project_id: str | None = None
    ) -> tuple[str, list[str]]:
        return await self._on(lambda s: s.create_box_with(entries, project_id))

    async def get_box(self, box_id: BoxId) -> Box:
        return await self._on(lambda s: s.get_box(box_id))

    async def append_to_box(self, box_id: BoxId, card_ids: Sequence[str | NewCard]) -> list[str]:
        return await self._on(lambda s: s.append_to_box(box_id, card_ids))

    async def named_box(
        self, name: str, *, initial: Sequence[NewCard] = (), project_id: str | None = None
    ) -> str:
        return await self._on(lambda s: s.named_box(name, initial=initial, project_id=project_id))

    async def close(self) -> None:
        """Nothing to release: the bridge's pool serves the whole process and outlives any agent."""
