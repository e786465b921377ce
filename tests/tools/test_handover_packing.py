"""pack_context: each numbered packing rule, each error, and the fixed instruction recipe."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from shipagent.config import ProfileConfig
from shipagent.errors import BadRequestError, NotFoundError
from shipagent.store.cards._cards import CARD_PARENT_POINTER, CARD_PROFILE, CARD_TASK_INSTRUCTION
from shipagent.tools.handover import (
    FieldsSchemaContent,
    HandoverPacker,
    JsonContent,
    SqliteCardBoxStore,
    TextContent,
)
from shipagent.tools.handover._packer import pack_context_with_instruction
from shipagent.tools.handover._resources import ResourceStore

pytestmark = pytest.mark.anyio

PROFILES = {
    "researcher": ProfileConfig(instructions="You research.", model="test", tools=["context_read"]),
    "writer": ProfileConfig(agent_md="profiles/writer.md"),
}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteCardBoxStore]:
    s = SqliteCardBoxStore(tmp_path / ".ship" / "cardbox.sqlite3", project_id="proj")
    yield s
    await s.close()


@pytest.fixture
def packer(store: SqliteCardBoxStore) -> HandoverPacker:
    return HandoverPacker(store, ResourceStore(store, PROFILES))


def _rows(store: SqliteCardBoxStore) -> tuple[int, int]:
    with sqlite3.connect(store.path) as conn:
        cards = conn.execute("SELECT COUNT(*) FROM cards").fetchone()[0]
        boxes = conn.execute("SELECT COUNT(*) FROM boxes").fetchone()[0]
    return int(cards), int(boxes)


async def _box_of(store: SqliteCardBoxStore, *texts: str) -> str:
    ids = [await store.add_card(type="chat.message", content=t, author_id="chat") for t in texts]
    return await store.create_box(ids)


def _pack(instruction_rules: list[Any] | None = None, **inherit: Any) -> dict[str, Any]:
    packing: dict[str, Any] = {}
    if instruction_rules is not None:
        packing["pack_arguments"] = instruction_rules
    if inherit:
        packing["inherit_context"] = inherit
    return {"context_packing_config": packing}


# -- 1. target profile ------------------------------------------------------------------------------


async def test_rule1_profile_from_arguments_wins(packer: HandoverPacker, store: SqliteCardBoxStore) -> None:
    handover = {"target_profile_config": {"profile_name": "writer"}}
    box_id, profile_box, attached = await packer.pack_context(
        None, "delegate_async", "api:chat:a", {"profile_name": "researcher"}, handover
    )
    profile = await packer.resource_store.get_profile(profile_box)
    assert profile.name == "researcher"
    assert profile.config.instructions == "You research."
    assert profile.config.tools == ["context_read"]
    assert attached == [] and (await store.get_box(box_id)).card_ids == []


async def test_rule1_profile_from_handover_config(packer: HandoverPacker) -> None:
    handover = {"target_profile_config": {"profile_name": "writer"}}
    _, profile_box, _ = await packer.pack_context(None, "t", "src", {}, handover)
    profile = await packer.resource_store.get_profile(profile_box)
    assert (profile.name, profile.config.agent_md) == ("writer", "profiles/writer.md")


async def test_rule1_profile_box_is_stable_and_holds_the_profile_card(
    packer: HandoverPacker, store: SqliteCardBoxStore
) -> None:
    first = await packer.resource_store.find_profile_by_name("researcher")
    second = await packer.resource_store.find_profile_by_name("researcher")
    assert first == second
    (card,) = await store.get_cards((await store.get_box(first)).card_ids)
    assert card.type == CARD_PROFILE
    assert card.content == JsonContent(
        {"name": "researcher", "instructions": "You research.", "model": "test", "tools": ["context_read"]}
    )
    # an edited profile gets a new box: older context boxes keep pointing at what they ran with
    edited = ResourceStore(store, {"researcher": ProfileConfig(instructions="You research harder.")})
    assert await edited.find_profile_by_name("researcher") != first


async def test_rule1_missing_profile_is_bad_request(
    packer: HandoverPacker, store: SqliteCardBoxStore
) -> None:
    with pytest.raises(BadRequestError, match="profile"):
        await packer.pack_context(None, "t", "src", {"instruction": "x"}, _pack([{"arg_key": "instruction"}]))
    with pytest.raises(BadRequestError, match="string"):
        await packer.pack_context(None, "t", "src", {"profile_name": 7}, {})


async def test_rule1_unknown_profile_is_not_found_and_names_it(packer: HandoverPacker) -> None:
    with pytest.raises(NotFoundError, match=r"'ghost'.*researcher, writer"):
        await packer.pack_context(None, "t", "src", {"profile_name": "ghost"}, {})


# -- 2. pack_arguments ------------------------------------------------------------------------------


async def test_rule2_packs_each_present_argument(packer: HandoverPacker, store: SqliteCardBoxStore) -> None:
    rules: list[Any] = [
        {"arg_key": "instruction"},
        {"arg_key": "data", "as_card_type": "task.input", "card_metadata": {"role": "assistant", "tag": 1}},
        {"arg_key": "note", "as_card_type": "task.note", "card_metadata": {"tag": 2}},
        {"arg_key": "absent"},
        "not a dict: skipped",
        {"arg_key": "count", "as_card_type": "task.count"},
    ]
    args = {
        "profile_name": "writer",
        "instruction": "Write the summary.",
        "data": {"rows": [1, 2]},
        "note": ["a", "b"],
        "count": 3,
    }
    _, _, attached = await packer.pack_context("proj", "my_tool", "src", args, _pack(rules))
    cards = await store.get_cards(attached)
    assert [(c.type, c.content, c.metadata, c.author_id) for c in cards] == [
        (CARD_TASK_INSTRUCTION, TextContent("Write the summary."), {"role": "user"}, "my_tool"),
        ("task.input", JsonContent({"rows": [1, 2]}), {"role": "assistant", "tag": 1}, "my_tool"),
        ("task.note", JsonContent(["a", "b"]), {"role": "user", "tag": 2}, "my_tool"),
        ("task.count", TextContent("3"), {"role": "user"}, "my_tool"),
    ]
    assert all(len(c.card_id) == 32 and c.project_id == "proj" for c in cards)
    assert attached == sorted(attached)  # uuid7 hex ids in creation order


async def test_rule2_card_metadata_is_copied_not_shared(packer: HandoverPacker) -> None:
    metadata: dict[str, Any] = {"tag": "x"}
    rules = [{"arg_key": "instruction", "card_metadata": metadata}]
    await packer.pack_context(None, "t", "src", {"profile_name": "writer", "instruction": "go"}, _pack(rules))
    assert metadata == {"tag": "x"}


async def test_rule2_result_fields_must_be_a_list(packer: HandoverPacker, store: SqliteCardBoxStore) -> None:
    rules = [{"arg_key": "fields", "as_card_type": "task.result_fields"}]
    args = {"profile_name": "writer", "fields": ["title", {"name": "score", "type": "int"}]}
    _, _, (card_id,) = await packer.pack_context(None, "t", "src", args, _pack(rules))
    card = await store.get_card(card_id)
    assert card.content == FieldsSchemaContent(["title", {"name": "score", "type": "int"}])
    before = _rows(store)
    with pytest.raises(BadRequestError, match=r"'fields'.*task\.result_fields.*list.*dict"):
        await packer.pack_context(
            None, "t", "src", {"profile_name": "writer", "fields": {"a": 1}}, _pack(rules)
        )
    assert _rows(store) == before


async def test_rule2_malformed_sections_are_bad_requests(packer: HandoverPacker) -> None:
    args = {"profile_name": "writer", "instruction": "x"}
    with pytest.raises(BadRequestError, match="pack_arguments"):
        await packer.pack_context(None, "t", "src", args, {"context_packing_config": {"pack_arguments": "x"}})
    with pytest.raises(BadRequestError, match="context_packing_config"):
        await packer.pack_context(None, "t", "src", args, {"context_packing_config": []})
    with pytest.raises(BadRequestError, match="card_metadata"):
        await packer.pack_context(
            None, "t", "src", args, _pack([{"arg_key": "instruction", "card_metadata": "x"}])
        )


# -- 3. include_boxes_from_args --------------------------------------------------------------------


async def test_rule3_inherits_cards_in_order_deduplicated(
    packer: HandoverPacker, store: SqliteCardBoxStore
) -> None:
    first = await _box_of(store, "q1", "a1")
    shared = (await store.get_box(first)).card_ids[1]
    second = await store.create_box(
        [shared, await store.add_card(type="chat.message", content="a2", author_id="c")]
    )
    args = {"profile_name": "writer", "instruction": "go", "boxes": [first, second], "one": first}
    handover = _pack([{"arg_key": "instruction"}], include_boxes_from_args=["boxes", "one", "not_given"])
    box_id, _, attached = await packer.pack_context(None, "t", "src", args, handover)
    cards = await store.get_cards(attached)
    assert [c.content for c in cards] == [
        TextContent("go"),
        TextContent("q1"),
        TextContent("a1"),
        TextContent("a2"),
    ]
    # inherited cards are the same cards, not copies
    assert attached[1:3] == (await store.get_box(first)).card_ids
    assert (await store.get_box(box_id)).card_ids == attached


async def test_rule3_missing_box_is_not_found_and_nothing_is_written(
    packer: HandoverPacker, store: SqliteCardBoxStore
) -> None:
    good = await _box_of(store, "x")
    await packer.resource_store.find_profile_by_name("writer")
    before = _rows(store)
    args = {"profile_name": "writer", "instruction": "go", "input_box_ids": [good, "no-such-box"]}
    handover = _pack(
        [{"arg_key": "instruction"}], include_boxes_from_args=["input_box_ids"], include_parent=True
    )
    with pytest.raises(NotFoundError, match="no-such-box"):
        await packer.pack_context(None, "t", "src", args, handover)
    assert _rows(store) == before  # the instruction card was not written either


@pytest.mark.parametrize("value", [{"box": "x"}, 1.5, True, [["nested"]], ""])
async def test_rule3_wrong_argument_type_is_bad_request(packer: HandoverPacker, value: object) -> None:
    args = {"profile_name": "writer", "input_box_ids": value}
    with pytest.raises(BadRequestError, match="input_box_ids"):
        await packer.pack_context(None, "t", "src", args, _pack(include_boxes_from_args=["input_box_ids"]))


async def test_rule3_integer_box_id_is_looked_up(packer: HandoverPacker) -> None:
    with pytest.raises(NotFoundError, match="'12345'"):
        await packer.pack_context(
            None, "t", "src", {"profile_name": "writer", "b": 12345}, _pack(include_boxes_from_args=["b"])
        )


# -- 4. include_parent ------------------------------------------------------------------------------


async def test_rule4_parent_pointer_is_last_with_system_role(
    packer: HandoverPacker, store: SqliteCardBoxStore
) -> None:
    inherited = await _box_of(store, "earlier")
    args = {"profile_name": "writer", "instruction": "go", "input_box_ids": inherited}
    handover = _pack(
        [{"arg_key": "instruction"}], include_boxes_from_args=["input_box_ids"], include_parent=True
    )
    _, _, attached = await packer.pack_context(None, "delegate_async", "telegram:chat:42", args, handover)
    parent = await store.get_card(attached[-1])
    assert parent.type == CARD_PARENT_POINTER
    assert parent.content == JsonContent({"parent_agent_id": "telegram:chat:42"})
    assert parent.metadata == {"role": "system"}
    assert parent.author_id == "delegate_async"
    assert len(attached) == 3


async def test_rule4_no_parent_unless_asked(packer: HandoverPacker, store: SqliteCardBoxStore) -> None:
    args = {"profile_name": "writer", "instruction": "go"}
    _, _, attached = await packer.pack_context(None, "t", "src", args, _pack([{"arg_key": "instruction"}]))
    assert [c.type for c in await store.get_cards(attached)] == [CARD_TASK_INSTRUCTION]


# -- 5. result -------------------------------------------------------------------------------------


async def test_rule5_returns_the_triple_and_the_box_is_stored(
    packer: HandoverPacker, store: SqliteCardBoxStore
) -> None:
    result = await packer.pack_context(
        None, "t", "src", {"profile_name": "writer", "instruction": "go"}, _pack([{"arg_key": "instruction"}])
    )
    context_box_id, target_profile_box_id, attached_card_ids = result
    box = await store.get_box(context_box_id)
    assert box.card_ids == attached_card_ids and box.project_id == "proj"
    assert target_profile_box_id == await packer.resource_store.find_profile_by_name("writer")
    assert result.context_box_id == context_box_id


# -- the fixed recipe -----------------------------------------------------------------------------


async def test_pack_context_with_instruction_recipe(
    packer: HandoverPacker, store: SqliteCardBoxStore
) -> None:
    inherited = await _box_of(store, "earlier question", "earlier answer")
    box_id, profile_box, attached = await pack_context_with_instruction(
        packer,
        project_id=None,
        tool_suffix="fork_join",
        source_agent_id="api:chat:boss",
        profile_name="researcher",
        instruction="Find the bug.",
        input_box_ids=[inherited],
    )
    cards = await store.get_cards(attached)
    assert [(c.type, c.content, c.role) for c in cards] == [
        (CARD_TASK_INSTRUCTION, TextContent("Find the bug."), "user"),
        ("chat.message", TextContent("earlier question"), "user"),
        ("chat.message", TextContent("earlier answer"), "user"),
        (CARD_PARENT_POINTER, JsonContent({"parent_agent_id": "api:chat:boss"}), "system"),
    ]
    assert (await packer.resource_store.get_profile(profile_box)).name == "researcher"
    assert (await store.get_box(box_id)).card_ids == attached


async def test_recipe_without_inputs_has_instruction_and_parent_only(
    packer: HandoverPacker, store: SqliteCardBoxStore
) -> None:
    _, _, attached = await packer.pack_context_with_instruction(
        project_id=None,
        tool_suffix="delegate_async",
        source_agent_id="src",
        profile_name="writer",
        instruction={"goal": "draft"},
        result_fields=["title"],
    )
    cards = await store.get_cards(attached)
    assert [(c.type, c.content) for c in cards] == [
        (CARD_TASK_INSTRUCTION, JsonContent({"goal": "draft"})),
        ("task.result_fields", FieldsSchemaContent(["title"])),
        (CARD_PARENT_POINTER, JsonContent({"parent_agent_id": "src"})),
    ]
