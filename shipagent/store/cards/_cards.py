"""Cards and boxes: the unit of context that agents hand to each other.

A **card** is one immutable piece of context — an instruction, a message of an earlier turn, a
pointer to the parent agent — with a type string saying what it is for and a ``metadata.role``
saying how a model should see it. A **box** is an ordered list of card ids. A box is what an agent
receives (its context box) and what it leaves behind (its output box); the same card can sit in
many boxes, so handing context on never copies it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeAlias

from ...errors import BadRequestError

__all__ = [
    "CARD_CHAT_MESSAGE",
    "CARD_PARENT_POINTER",
    "CARD_PROFILE",
    "CARD_TASK_INSTRUCTION",
    "CARD_TASK_RESULT_FIELDS",
    "Box",
    "Card",
    "CardContent",
    "FieldsSchemaContent",
    "JsonContent",
    "NewCard",
    "TextContent",
    "content_from_json",
    "content_to_json",
    "to_content",
]

CARD_TASK_INSTRUCTION = "task.instruction"
"""What the receiving agent is asked to do; becomes its user message."""
CARD_TASK_RESULT_FIELDS = "task.result_fields"
"""The fields the receiving agent's answer should have (a :class:`FieldsSchemaContent`)."""
CARD_PARENT_POINTER = "meta.parent_pointer"
"""Which agent delegated the work (``{"parent_agent_id": ...}``); becomes a system line."""
CARD_PROFILE = "sys.profile"
"""An agent profile from ship.json ``profiles``, held in the profile's box."""
CARD_CHAT_MESSAGE = "chat.message"
"""One message of a completed turn, written to the chat's output box (``metadata.role`` tells whose)."""


@dataclass(frozen=True, slots=True)
class TextContent:
    """Plain text."""

    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class JsonContent:
    """Any JSON value (usually a dict or a list)."""

    data: Any
    kind: Literal["json"] = "json"


@dataclass(frozen=True, slots=True)
class FieldsSchemaContent:
    """A list of field descriptions (``task.result_fields``): names, or dicts with name/type/description."""

    fields: list[Any]
    kind: Literal["fields"] = "fields"


CardContent: TypeAlias = TextContent | JsonContent | FieldsSchemaContent
"""What a card carries: text, a JSON value, or a schema of fields to fill in."""


@dataclass(frozen=True, slots=True)
class Card:
    """One stored card. Cards never change once written; new context means new cards.

    Attributes:
        card_id: uuid7 hex (sorts by creation time).
        project_id: the project the card belongs to (one store may serve several).
        type: what the card is for (``task.instruction``, ``meta.parent_pointer``, ``chat.message``…).
        content: the payload.
        author_id: who wrote it (the tool that packed it, or the chat key of the turn).
        metadata: free-form; ``role`` (``user`` | ``assistant`` | ``system``) drives rendering.
        created_at: when it was written (UTC).
    """

    card_id: str
    project_id: str
    type: str
    content: CardContent
    author_id: str
    metadata: dict[str, Any]
    created_at: datetime

    @property
    def role(self) -> str:
        """``metadata["role"]`` when it is a string, else ``"user"``."""
        role = self.metadata.get("role")
        return role if isinstance(role, str) else "user"


@dataclass(frozen=True, slots=True)
class Box:
    """An ordered list of card ids.

    Attributes:
        box_id: uuid7 hex.
        project_id: the project the box belongs to.
        card_ids: the cards, in the order a receiving agent sees them.
        created_at: when the box was created (UTC); appending does not change it.
    """

    box_id: str
    project_id: str
    card_ids: list[str]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class NewCard:
    """A card to be written: what :meth:`CardBoxStore.create_box_with` takes for cards that do not exist yet."""

    type: str
    content: CardContent
    author_id: str
    metadata: dict[str, Any] = field(default_factory=dict)


def to_content(value: object) -> CardContent:
    """Coerce what a caller passes as card content: a content object, a ``str``, or a dict/list.

    Raises:
        BadRequestError: for any other type (a number is ambiguous: say ``str(n)`` or ``{"n": n}``).
    """
    if isinstance(value, TextContent | JsonContent | FieldsSchemaContent):
        return value
    if isinstance(value, str):
        return TextContent(value)
    if isinstance(value, dict | list):
        return JsonContent(value)
    raise BadRequestError(
        f"card content must be str, dict, list or a content object, got {type(value).__name__}"
    )


def content_to_json(content: CardContent) -> dict[str, Any]:
    """The stored (JSON) form of a content object: ``{"kind": ..., <field>: ...}``."""
    if isinstance(content, TextContent):
        return {"kind": "text", "text": content.text}
    if isinstance(content, JsonContent):
        return {"kind": "json", "data": content.data}
    return {"kind": "fields", "fields": content.fields}


def content_from_json(data: Mapping[str, Any]) -> CardContent:
    """Inverse of :func:`content_to_json`; an unknown kind is kept as JSON rather than lost."""
    kind = data.get("kind")
    if kind == "text":
        return TextContent(str(data.get("text", "")))
    if kind == "fields":
        return FieldsSchemaContent(list(data.get("fields", [])))
    if kind == "json":
        return JsonContent(data.get("data"))
    return JsonContent(dict(data))


# json.dumps with options builds a new encoder per call; a turn serialises four values.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

CardRow = tuple[str, str, str, str]
"""A new card, serialised before its transaction: ``(type, content, author_id, metadata)``."""


def _dumps(value: Any, what: str) -> str:
    try:
        return _ENCODE(value)
    except (TypeError, ValueError) as exc:
        raise BadRequestError(f"card {what} is not JSON-serialisable: {exc}") from None


def serialise_card(card: NewCard) -> CardRow:
    """The card's stored columns (SQLite and Postgres alike); serialising is the check, done
    before any transaction starts."""
    content = _dumps(content_to_json(card.content), "content")
    return card.type, content, card.author_id, _dumps(card.metadata, "metadata")


def card_from_row(row: tuple[Any, ...]) -> Card:
    """A card from its stored columns (the ``cards`` table of either card store)."""
    card_id, project_id, type_, content, author_id, metadata, created_at = row
    return Card(
        card_id=card_id,
        project_id=project_id,
        type=type_,
        content=content_from_json(json.loads(content)),
        author_id=author_id,
        metadata=json.loads(metadata),
        created_at=datetime.fromisoformat(created_at),
    )
