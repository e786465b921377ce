"""The SQLite card/box store: a real file under .ship/, transactional writes, NotFound with ids."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from shipagent.errors import BadRequestError, NotFoundError
from shipagent.tools.handover import (
    CardBoxStore,
    FieldsSchemaContent,
    JsonContent,
    NewCard,
    SqliteCardBoxStore,
    TextContent,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteCardBoxStore]:
    s = SqliteCardBoxStore(tmp_path / ".ship" / "cardbox.sqlite3", project_id="proj")
    yield s
    await s.close()


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


async def test_it_is_a_cardboxstore(store: SqliteCardBoxStore) -> None:
    assert isinstance(store, CardBoxStore)


async def test_card_round_trip_keeps_every_field(store: SqliteCardBoxStore) -> None:
    card_id = await store.add_card(
        type="task.instruction",
        content="summarise the log",
        author_id="delegate_async",
        metadata={"role": "user", "n": 1},
    )
    card = await store.get_card(card_id)
    assert card.card_id == card_id and len(card_id) == 32
    assert card.project_id == "proj"
    assert card.type == "task.instruction"
    assert card.content == TextContent("summarise the log")
    assert card.author_id == "delegate_async"
    assert card.metadata == {"role": "user", "n": 1}
    assert card.role == "user"
    assert card.created_at.tzinfo is not None


async def test_content_coercion(store: SqliteCardBoxStore) -> None:
    as_dict = await store.add_card(type="t", content={"a": [1, "é"]}, author_id="x")
    as_list = await store.add_card(type="t", content=[1, 2], author_id="x")
    fields = await store.add_card(
        type="t", content=FieldsSchemaContent(["summary", {"name": "score"}]), author_id="x"
    )
    cards = await store.get_cards([as_dict, as_list, fields])
    assert [c.content for c in cards] == [
        JsonContent({"a": [1, "é"]}),
        JsonContent([1, 2]),
        FieldsSchemaContent(["summary", {"name": "score"}]),
    ]
    with pytest.raises(BadRequestError, match="int"):
        await store.add_card(type="t", content=42, author_id="x")  # type: ignore[arg-type]


async def test_unserialisable_metadata_is_rejected_and_nothing_written(store: SqliteCardBoxStore) -> None:
    await store.add_card(type="t", content="first", author_id="x")  # creates the file
    with pytest.raises(BadRequestError, match="metadata"):
        await store.add_card(type="t", content="x", author_id="x", metadata={"when": object()})
    assert _count(store.path, "cards") == 1


async def test_missing_card_and_box_name_the_id(store: SqliteCardBoxStore) -> None:
    with pytest.raises(NotFoundError, match="nope-card"):
        await store.get_card("nope-card")
    with pytest.raises(NotFoundError, match="nope-box"):
        await store.get_box("nope-box")
    with pytest.raises(NotFoundError, match="ghost"):
        await store.create_box(["ghost"])
    box = await store.create_box([])
    with pytest.raises(NotFoundError, match="nope-box"):
        await store.append_to_box("nope-box", [])
    with pytest.raises(NotFoundError, match="ghost"):
        await store.append_to_box(box, ["ghost"])


async def test_box_keeps_order_and_duplicates_and_appends_at_the_end(store: SqliteCardBoxStore) -> None:
    a = await store.add_card(type="t", content="a", author_id="x")
    b = await store.add_card(type="t", content="b", author_id="x")
    c = await store.add_card(type="t", content="c", author_id="x")
    box_id = await store.create_box([b, a])
    await store.append_to_box(box_id, [c, a])
    box = await store.get_box(box_id)
    assert box.card_ids == [b, a, c, a]
    assert box.project_id == "proj"
    assert [x.content for x in await store.get_cards(box.card_ids)] == [
        TextContent("b"),
        TextContent("a"),
        TextContent("c"),
        TextContent("a"),
    ]


async def test_failed_append_changes_nothing(store: SqliteCardBoxStore) -> None:
    a = await store.add_card(type="t", content="a", author_id="x")
    box_id = await store.create_box([a])
    with pytest.raises(NotFoundError):
        await store.append_to_box(box_id, [a, "ghost"])
    assert (await store.get_box(box_id)).card_ids == [a]


async def test_create_box_with_is_all_or_nothing(store: SqliteCardBoxStore) -> None:
    a = await store.add_card(type="t", content="a", author_id="x")
    new = NewCard(
        type="task.instruction", content=TextContent("go"), author_id="tool", metadata={"role": "user"}
    )
    box_id, ids = await store.create_box_with([new, a])
    assert ids[1] == a and (await store.get_box(box_id)).card_ids == ids
    assert (await store.get_card(ids[0])).content == TextContent("go")
    cards_before, boxes_before = _count(store.path, "cards"), _count(store.path, "boxes")
    with pytest.raises(NotFoundError, match="ghost"):
        await store.create_box_with([new, "ghost"])
    assert (_count(store.path, "cards"), _count(store.path, "boxes")) == (cards_before, boxes_before)


async def test_file_is_wal_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / ".ship" / "cardbox.sqlite3"
    first = SqliteCardBoxStore(path, project_id="p")
    card = await first.add_card(type="t", content="kept", author_id="x")
    box = await first.create_box([card])
    await first.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    second = SqliteCardBoxStore(path, project_id="p")
    assert (await second.get_box(box)).card_ids == [card]
    assert (await second.get_card(card)).content == TextContent("kept")
    await second.close()


async def test_project_id_override(store: SqliteCardBoxStore) -> None:
    card = await store.add_card(type="t", content="x", author_id="x", project_id="other")
    box = await store.create_box([card], project_id="other")
    assert (await store.get_card(card)).project_id == "other"
    assert (await store.get_box(box)).project_id == "other"


async def test_named_box_is_created_once_even_under_concurrency(store: SqliteCardBoxStore) -> None:
    initial = [NewCard(type="sys.profile", content=JsonContent({"name": "r"}), author_id="ship.json")]
    results: list[str] = []

    async def get() -> None:
        results.append(await store.named_box("profile:r", initial=initial))

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(get)
    assert len(set(results)) == 1
    assert len((await store.get_box(results[0])).card_ids) == 1
    assert _count(store.path, "cards") == 1
    assert await store.named_box("profile:r", project_id="elsewhere") != results[0]


async def test_many_cards_in_one_box(store: SqliteCardBoxStore) -> None:
    entries = [NewCard(type="t", content=TextContent(str(i)), author_id="x") for i in range(1200)]
    box_id, ids = await store.create_box_with(entries)
    cards = await store.get_cards((await store.get_box(box_id)).card_ids)
    assert [c.content for c in cards] == [TextContent(str(i)) for i in range(1200)]
    assert ids == sorted(ids)  # uuid7: creation order is id order


async def test_append_new_cards_in_one_transaction(store: SqliteCardBoxStore) -> None:
    box_id = await store.create_box([], project_id="chat-project")
    old = await store.add_card(type="t", content="old", author_id="x")
    ids = await store.append_to_box(
        box_id,
        [
            old,
            NewCard(type="chat.message", content=TextContent("hi"), author_id="c", metadata={"role": "user"}),
        ],
    )
    assert (await store.get_box(box_id)).card_ids == ids and ids[0] == old
    new_card = await store.get_card(ids[1])
    assert new_card.project_id == "chat-project"  # new cards join the box's project
    before = _count(store.path, "cards")
    with pytest.raises(NotFoundError, match="ghost"):
        await store.append_to_box(
            box_id, [NewCard(type="t", content=TextContent("x"), author_id="c"), "ghost"]
        )
    assert _count(store.path, "cards") == before
    assert (await store.get_box(box_id)).card_ids == ids
