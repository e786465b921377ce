"""A context box as a sub-agent's input: the user message, system lines and history messages.

The receiving agent must see exactly what was packed and nothing else, in a shape a model reads
naturally: the task as the user's message, who delegated it as a system line, inherited turns as
the conversation that came before. This module is pure (cards in, pydantic-ai messages out) so
every rule is tested without a store or a model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from ...store.cards._cards import (
    CARD_PARENT_POINTER,
    CARD_TASK_INSTRUCTION,
    CARD_TASK_RESULT_FIELDS,
    Card,
    CardContent,
    FieldsSchemaContent,
    JsonContent,
    TextContent,
)
from ...store.cards._store import BoxId, CardBoxStore

__all__ = ["SubAgentInput", "load_sub_agent_input", "render_content", "render_context"]


@dataclass(frozen=True, slots=True)
class SubAgentInput:
    """What a sub-agent receives from its context box.

    Attributes:
        prompt: the user message: every ``task.instruction`` card in order, then the requested
            result fields.
        system_lines: one line per ``meta.parent_pointer`` card.
        history: the inherited cards of other types, in box order, as pydantic-ai messages
            (``role`` ``assistant`` → a response, ``system`` → a system prompt part, else a user
            prompt), preceded by one request holding the system lines.
    """

    prompt: str
    system_lines: list[str] = field(default_factory=list)
    history: list[ModelMessage] = field(default_factory=list)


def _json_text(data: Any) -> str:
    if isinstance(data, str):
        return data
    return json.dumps(data, ensure_ascii=False, indent=2, sort_keys=False, default=str)


def _field_line(item: Any) -> str:
    if isinstance(item, str):
        return f"- {item}"
    if isinstance(item, dict) and "name" in item:
        kind = f" ({item['type']})" if item.get("type") else ""
        desc = f": {item['description']}" if item.get("description") else ""
        return f"- {item['name']}{kind}{desc}"
    return f"- {_json_text(item)}"


def render_content(content: CardContent) -> str:
    """A card's content as the text a model reads: text as is, JSON pretty-printed, fields as a list."""
    if isinstance(content, TextContent):
        return content.text
    if isinstance(content, JsonContent):
        return _json_text(content.data)
    assert isinstance(content, FieldsSchemaContent)
    return "Give your answer with these fields:\n" + "\n".join(_field_line(f) for f in content.fields)


def _parent_line(card: Card) -> str:
    data = card.content.data if isinstance(card.content, JsonContent) else None
    parent = data.get("parent_agent_id") if isinstance(data, dict) else render_content(card.content)
    return (
        f"You are working on a task delegated to you by agent {parent!s}. "
        "Your final answer is returned to that agent."
    )


def render_context(cards: Sequence[Card]) -> SubAgentInput:
    """Turn the cards of a context box, in box order, into a sub-agent's input.

    Rules: ``task.instruction`` cards form the user message (joined by blank lines) and
    ``task.result_fields`` cards are appended to it; ``meta.parent_pointer`` cards become system
    lines; every other card becomes one history message in order, its content rendered to text.
    """
    instructions: list[str] = []
    result_fields: list[str] = []
    system_lines: list[str] = []
    system_parts: list[SystemPromptPart] = []
    inherited: list[ModelMessage] = []
    for card in cards:
        if card.type == CARD_TASK_INSTRUCTION:
            instructions.append(render_content(card.content))
        elif card.type == CARD_TASK_RESULT_FIELDS:
            result_fields.append(render_content(card.content))
        elif card.type == CARD_PARENT_POINTER:
            system_lines.append(_parent_line(card))
            system_parts.append(SystemPromptPart(system_lines[-1], timestamp=card.created_at))
        else:
            text = render_content(card.content)
            role, when = card.role, card.created_at  # a message is dated when its card was written
            if role == "assistant":
                inherited.append(ModelResponse(parts=[TextPart(text)], timestamp=when))
            elif role == "system":
                inherited.append(ModelRequest(parts=[SystemPromptPart(text, timestamp=when)]))
            else:
                inherited.append(ModelRequest(parts=[UserPromptPart(text, timestamp=when)]))
    history: list[ModelMessage] = []
    if system_parts:
        history.append(ModelRequest(parts=system_parts))
    history.extend(inherited)
    prompt = "\n\n".join([*instructions, *result_fields])
    return SubAgentInput(prompt=prompt, system_lines=system_lines, history=history)


async def load_sub_agent_input(store: CardBoxStore, context_box_id: BoxId) -> SubAgentInput:
    """Read a context box and render it (see :func:`render_context`).

    Raises:
        NotFoundError: the box or one of its cards does not exist.
    """
    box = await store.get_box(context_box_id)
    return render_context(await store.get_cards(box.card_ids))
