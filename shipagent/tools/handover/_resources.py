"""Agent profiles as cards: what ``pack_context`` resolves a ``profile_name`` against.

ship.json ``profiles.<name>`` declares the agents this one may hand work to. Each profile is written
once as a ``sys.profile`` card in its own box, so a context box records *which* profile (and which
version of its configuration) a delegated run used — the box id outlives later edits of ship.json.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...config import ProfileConfig
from ...errors import BadRequestError, NotFoundError
from ...store.cards._cards import CARD_PROFILE, JsonContent, NewCard
from ...store.cards._store import BoxId, CardBoxStore

__all__ = ["ResolvedProfile", "ResourceStore"]


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    """A profile read back from its box.

    Attributes:
        name: the key under ship.json ``profiles``.
        config: the profile's configuration as it was when the box was written.
        box_id: the profile box.
    """

    name: str
    config: ProfileConfig
    box_id: str


class ResourceStore:
    """Resolves profile names to profile boxes in a :class:`CardBoxStore`.

    Args:
        store: where profile cards and boxes are written.
        profiles: ship.json ``profiles`` (name → configuration).
        author_id: the author recorded on profile cards (the project's name).
    """

    def __init__(
        self, store: CardBoxStore, profiles: Mapping[str, ProfileConfig], *, author_id: str = "ship.json"
    ) -> None:
        self.store = store
        self.profiles = dict(profiles)
        self.author_id = author_id

    def profile_names(self) -> list[str]:
        """The names of the configured profiles, sorted."""
        return sorted(self.profiles)

    async def find_profile_by_name(self, name: str) -> str:
        """The box id holding the profile card of ``name``.

        The box is created on first use and reused afterwards (also after a restart) for as long as
        the profile's configuration is unchanged; an edited profile gets a new box, so older context
        boxes still point at what they actually ran with.

        Raises:
            BadRequestError: ``name`` is not a non-empty string.
            NotFoundError: no profile of that name in ship.json ``profiles``.
        """
        if not isinstance(name, str) or not name:
            raise BadRequestError(f"profile_name must be a non-empty string, got {name!r}")
        config = self.profiles.get(name)
        if config is None:
            known = ", ".join(self.profile_names()) or "none are configured"
            raise NotFoundError(f"profile {name!r} not found (ship.json profiles: {known})")
        data: dict[str, Any] = {"name": name, **config.model_dump(by_alias=True, exclude_none=True)}
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()[:16]
        card = NewCard(type=CARD_PROFILE, content=JsonContent(data), author_id=self.author_id)
        return await self.store.named_box(f"profile:{name}:{digest}", initial=[card])

    async def get_profile(self, box_id: BoxId) -> ResolvedProfile:
        """Read a profile back from its box (the inverse of :meth:`find_profile_by_name`).

        Raises:
            NotFoundError: the box does not exist.
            BadRequestError: the box holds no ``sys.profile`` card.
        """
        box = await self.store.get_box(box_id)
        for card in await self.store.get_cards(box.card_ids):
            if card.type == CARD_PROFILE and isinstance(card.content, JsonContent):
                data = dict(card.content.data)
                name = str(data.pop("name"))
                return ResolvedProfile(name, ProfileConfig.model_validate(data), box.box_id)
        raise BadRequestError(f"box {box.box_id!r} holds no {CARD_PROFILE} card")
