"""Handover between agents: cards and boxes, context packing, and rendering for sub-agents.

An agent hands work to another agent profile by packing a **context box** — the instruction, cards
of earlier boxes it chooses to pass on, a pointer to itself — and the receiving run sees exactly
that box and nothing else. Everything is stored as cards in boxes (``.ship/cardbox.sqlite3``) so it
can be inspected afterwards.
"""

from ._cards import (
    CARD_CHAT_MESSAGE,
    CARD_PARENT_POINTER,
    CARD_PROFILE,
    CARD_TASK_INSTRUCTION,
    CARD_TASK_RESULT_FIELDS,
    Box,
    Card,
    CardContent,
    FieldsSchemaContent,
    JsonContent,
    NewCard,
    TextContent,
)
from ._delegation import (
    DelegationLimitError,
    DelegationTask,
    SubAgent,
    TaskStatus,
    delegate_chat_key,
)
from ._ids import Uuid7Generator, uuid7
from ._inspect import format_box
from ._packer import HandoverPacker, PackedContext, instruction_handover, pack_context_with_instruction
from ._render import SubAgentInput, load_sub_agent_input, render_content, render_context
from ._resources import ResolvedProfile, ResourceStore
from ._runtime import Handover, SubAgentFactory
from ._sqlite import SqliteCardBoxStore
from ._store import BoxId, CardBoxStore
from ._tools import DELEGATION_TOOL_NAMES, ForkTask

__all__ = [
    "CARD_CHAT_MESSAGE",
    "CARD_PARENT_POINTER",
    "CARD_PROFILE",
    "CARD_TASK_INSTRUCTION",
    "CARD_TASK_RESULT_FIELDS",
    "DELEGATION_TOOL_NAMES",
    "Box",
    "BoxId",
    "Card",
    "CardBoxStore",
    "CardContent",
    "DelegationLimitError",
    "DelegationTask",
    "FieldsSchemaContent",
    "ForkTask",
    "Handover",
    "HandoverPacker",
    "JsonContent",
    "NewCard",
    "PackedContext",
    "ResolvedProfile",
    "ResourceStore",
    "SqliteCardBoxStore",
    "SubAgent",
    "SubAgentFactory",
    "SubAgentInput",
    "TaskStatus",
    "TextContent",
    "Uuid7Generator",
    "delegate_chat_key",
    "format_box",
    "instruction_handover",
    "load_sub_agent_input",
    "pack_context_with_instruction",
    "render_content",
    "render_context",
    "uuid7",
]
