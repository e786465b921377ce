"""The card/box store interface.

Everything in :mod:`shipagent.tools.handover` talks to a :class:`CardBoxStore`, never to SQLite directly,
so a deployment that wants cards in a server database (PostgreSQL) swaps
the implementation and keeps the packer, the tools and the rendering unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ._cards import Box, Card, CardContent, NewCard

__all__ = ["BoxId", "CardBoxStore"]

BoxId = str | int
"""A box id as callers may pass it: integers from other card stores, or our uuid7 hex."""


@runtime_checkable
class CardBoxStore(Protocol):
    """Async storage of cards and boxes. Every write is one transaction.

    Implementations raise :class:`~shipagent.errors.NotFoundError` (naming the id) for a missing
    card or box and :class:`~shipagent.errors.BadRequestError` for content or metadata that cannot
    be stored.
    """

    @property
    def project_id(self) -> str:
        """The project id used when a call passes ``project_id=None``."""
        ...

    async def add_card(
        self,
        *,
        type: str,
        content: CardContent | str | dict[str, Any] | list[Any],
        author_id: str,
        metadata: dict[str, Any] | None = None,
        project_id: str | None = None,
    ) -> str:
        """Write one card; ``str`` content becomes text, dict/list becomes JSON. Returns its id."""
        ...

    async def get_card(self, card_id: str) -> Card:
        """The card with this id."""
        ...

    async def get_cards(self, card_ids: Sequence[str]) -> list[Card]:
        """The cards with these ids, in the order asked (one round trip for a whole box)."""
        ...

    async def create_box(self, card_ids: Sequence[str], project_id: str | None = None) -> str:
        """A new box holding existing cards, in order. Returns its id."""
        ...

    async def create_box_with(
        self, entries: Sequence[str | NewCard], project_id: str | None = None
    ) -> tuple[str, list[str]]:
        """Write the new cards among ``entries`` and a box of all of them, in one transaction.

        Each entry is an existing card id or a :class:`NewCard`. Either everything is written or
        nothing is, so a failed packing never leaves orphan cards behind.

        Returns:
            ``(box_id, card_ids)`` with ``card_ids`` in box order.
        """
        ...

    async def get_box(self, box_id: BoxId) -> Box:
        """The box with this id."""
        ...

    async def append_to_box(self, box_id: BoxId, card_ids: Sequence[str | NewCard]) -> list[str]:
        """Add cards to the end of a box, in one transaction.

        Each entry is an existing card id or a :class:`NewCard` written in the same transaction
        (a turn's messages land in the chat's output box together or not at all).

        Returns:
            The ids of the appended cards, in order.
        """
        ...

    async def named_box(
        self, name: str, *, initial: Sequence[NewCard] = (), project_id: str | None = None
    ) -> str:
        """The box registered under ``name``; created (with the ``initial`` cards) on first use.

        Names give long-lived boxes a stable handle across restarts: a chat's output box, a
        profile's box. Get-or-create is atomic, so two callers never make two boxes for one name.
        """
        ...

    async def close(self) -> None:
        """Release the connection; a later call may open it again."""
        ...
