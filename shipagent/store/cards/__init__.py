"""Cards and boxes as data: the output box of each chat and the context boxes of hand-overs.

A :class:`Card` is one record (text, JSON or a fields schema) in a :class:`Box`; a
:class:`CardBoxStore` keeps them (``.ship/cardbox.sqlite3`` by default, in
:class:`SqliteCardBoxStore`). Handing work to another agent with them is
:mod:`shipagent.tools.handover`.
"""

from ._cards import (
    CARD_CHAT_MESSAGE,
    Box,
    Card,
    CardContent,
    FieldsSchemaContent,
    JsonContent,
    NewCard,
    TextContent,
)
from ._sqlite import SqliteCardBoxStore
from ._store import BoxId, CardBoxStore

__all__ = [
    "CARD_CHAT_MESSAGE",
    "Box",
    "BoxId",
    "Card",
    "CardBoxStore",
    "CardContent",
    "FieldsSchemaContent",
    "JsonContent",
    "NewCard",
    "SqliteCardBoxStore",
    "TextContent",
]
