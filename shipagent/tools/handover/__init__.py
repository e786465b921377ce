"""Handover between agents: cards and boxes, context packing, and rendering for sub-agents.

An agent hands work to another agent profile by packing a **context box** — the instruction, cards
of earlier boxes it chooses to pass on, a pointer to itself — and the receiving run sees exactly
that box and nothing else. Everything is stored as cards in boxes (``.ship/cardbox.sqlite3``) so it
can be inspected afterwards.
"""

from ...store.cards import (
    CARD_CHAT_MESSAGE,
    Box,
    BoxId,
    Card,
    CardBoxStore,
    CardContent,
    FieldsSchemaContent,
    JsonContent,
    NewCard,
    SqliteCardBoxStore,
    TextContent,
)
from ._packer import HandoverPacker
from ._resources import ResolvedProfile
from ._runtime import Handover

__all__ = [
    "CARD_CHAT_MESSAGE",
    "Box",
    "BoxId",
    "Card",
    "CardBoxStore",
    "CardContent",
    "FieldsSchemaContent",
    "Handover",
    "HandoverPacker",
    "JsonContent",
    "NewCard",
    "ResolvedProfile",
    "SqliteCardBoxStore",
    "TextContent",
]
