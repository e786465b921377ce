"""A context box as a sub-agent's input: user message, system line, inherited history."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, TextPart, UserPromptPart

from shipagent.config import ProfileConfig
from shipagent.errors import NotFoundError
from shipagent.tools.handover import (
    Card,
    CardContent,
    FieldsSchemaContent,
    HandoverPacker,
    JsonContent,
    SqliteCardBoxStore,
    TextContent,
)
from shipagent.tools.handover._render import load_sub_agent_input, render_content, render_context
from shipagent.tools.handover._resources import ResourceStore

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _card(type_: str, content: CardContent, **metadata: Any) -> Card:
    return Card("id", "p", type_, content, "author", dict(metadata), WHEN)


def test_instruction_becomes_the_user_message_and_parent_a_system_line() -> None:
    rendered = render_context(
        [
            _card("task.instruction", TextContent("Summarise the incident."), role="user"),
            _card("meta.parent_pointer", JsonContent({"parent_agent_id": "api:chat:boss"}), role="system"),
        ]
    )
    assert rendered.prompt == "Summarise the incident."
    assert rendered.system_lines == [
        "You are working on a task delegated to you by agent api:chat:boss. "
        "Your final answer is returned to that agent."
    ]
    assert rendered.history == [
        ModelRequest(parts=[SystemPromptPart(rendered.system_lines[0], timestamp=WHEN)])
    ]


def test_inherited_cards_become_history_in_order_by_role() -> None:
    rendered = render_context(
        [
            _card("task.instruction", TextContent("Continue."), role="user"),
            _card("chat.message", TextContent("What broke?"), role="user"),
            _card("chat.message", TextContent("The disk filled up."), role="assistant"),
            _card("note", TextContent("Be terse."), role="system"),
            _card("data", JsonContent({"free_gb": 0}), role="user"),
            _card("no.role", TextContent("plain")),
        ]
    )
    assert rendered.prompt == "Continue."
    assert rendered.system_lines == []
    assert rendered.history == [
        ModelRequest(parts=[UserPromptPart("What broke?", timestamp=WHEN)]),
        ModelResponse(parts=[TextPart("The disk filled up.")], timestamp=WHEN),
        ModelRequest(parts=[SystemPromptPart("Be terse.", timestamp=WHEN)]),
        ModelRequest(parts=[UserPromptPart('{\n  "free_gb": 0\n}', timestamp=WHEN)]),
        ModelRequest(parts=[UserPromptPart("plain", timestamp=WHEN)]),
    ]


def test_system_lines_come_before_inherited_history() -> None:
    rendered = render_context(
        [
            _card("chat.message", TextContent("earlier"), role="user"),
            _card("meta.parent_pointer", JsonContent({"parent_agent_id": "boss"}), role="system"),
        ]
    )
    assert isinstance(rendered.history[0], ModelRequest)
    assert isinstance(rendered.history[0].parts[0], SystemPromptPart)
    assert rendered.history[1] == ModelRequest(parts=[UserPromptPart("earlier", timestamp=WHEN)])


def test_json_and_fields_cards_render_as_text() -> None:
    rendered = render_context(
        [
            _card("task.instruction", JsonContent({"goal": "rank", "items": ["a", "b"]})),
            _card("task.instruction", TextContent("Be brief.")),
            _card(
                "task.result_fields",
                FieldsSchemaContent(["title", {"name": "score", "type": "int", "description": "0-10"}, 3]),
            ),
        ]
    )
    assert rendered.prompt == (
        '{\n  "goal": "rank",\n  "items": [\n    "a",\n    "b"\n  ]\n}\n\n'
        "Be brief.\n\n"
        "Give your answer with these fields:\n- title\n- score (int): 0-10\n- 3"
    )
    assert render_content(JsonContent("just a string")) == "just a string"


def test_empty_box_renders_empty() -> None:
    rendered = render_context([])
    assert (rendered.prompt, rendered.system_lines, rendered.history) == ("", [], [])


@pytest.mark.anyio
async def test_packed_box_round_trips_to_sub_agent_input(tmp_path: Path) -> None:
    store = SqliteCardBoxStore(tmp_path / "cardbox.sqlite3")
    try:
        packer = HandoverPacker(store, ResourceStore(store, {"writer": ProfileConfig(instructions="w")}))
        q = await store.add_card(type="chat.message", content="Q?", author_id="c", metadata={"role": "user"})
        a = await store.add_card(
            type="chat.message", content="A.", author_id="c", metadata={"role": "assistant"}
        )
        earlier = await store.create_box([q, a])
        box_id, _, _ = await packer.pack_context_with_instruction(
            project_id=None,
            tool_suffix="delegate_async",
            source_agent_id="boss",
            profile_name="writer",
            instruction="Write it up.",
            input_box_ids=earlier,
        )
        rendered = await load_sub_agent_input(store, box_id)
        assert rendered.prompt == "Write it up."
        assert [type(m).__name__ for m in rendered.history] == [
            "ModelRequest",
            "ModelRequest",
            "ModelResponse",
        ]
        q_card, a_card = await store.get_cards([q, a])
        assert rendered.history[1:] == [
            ModelRequest(parts=[UserPromptPart("Q?", timestamp=q_card.created_at)]),
            ModelResponse(parts=[TextPart("A.")], timestamp=a_card.created_at),
        ]
        with pytest.raises(NotFoundError, match="missing-box"):
            await load_sub_agent_input(store, "missing-box")
    finally:
        await store.close()
