"""A turn's append to its output box skips reading the box when this store appended to it last.

The SQLite store remembers each box's project and next position after its own appends; these
tests prove the fallback when that memory is stale (another store instance, another process)
keeps ``box_cards`` positions unique and every card in commit order.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import anyio
import pytest

from shipagent.errors import BadRequestError, NotFoundError
from shipagent.tools.handover import NewCard, SqliteCardBoxStore, TextContent

pytestmark = pytest.mark.anyio


def _card(text: str) -> NewCard:
    return NewCard(type="chat.message", content=TextContent(text), author_id="k", metadata={"n": text})


def _positions(path: Path, box: str) -> list[int]:
    """The box's positions as stored, in order."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT position FROM box_cards WHERE box_id = ? ORDER BY position", (box,))
        return [int(p) for (p,) in rows.fetchall()]


_OTHER_PROCESS = """
import sys
from pathlib import Path
from shipagent.tools.handover import NewCard, SqliteCardBoxStore, TextContent
store = SqliteCardBoxStore(Path(sys.argv[1]), project_id="p")
store.append_to_box_sync(sys.argv[2], [NewCard("chat.message", TextContent(t), "k") for t in sys.argv[3:]])
"""


async def test_appends_from_two_stores_and_a_process_keep_positions_unique(tmp_path: Path) -> None:
    path = tmp_path / ".ship" / "cardbox.sqlite3"
    first = SqliteCardBoxStore(path, project_id="p")
    second = SqliteCardBoxStore(path, project_id="p")
    box = await first.create_box([])
    first.append_to_box_sync(box, [_card("a1"), _card("a2")])  # first reads the box, remembers
    first.append_to_box_sync(box, [_card("a3")])  # and now appends without reading it
    second.append_to_box_sync(box, [_card("b1")])  # behind first's back
    first.append_to_box_sync(box, [_card("a4"), _card("a5")])  # stale: its insert fails over
    await anyio.run_process([sys.executable, "-c", _OTHER_PROCESS, str(path), box, "c1", "c2"], check=True)
    second.append_to_box_sync(box, [_card("b2")])  # second is stale too
    first.append_to_box_sync(box, [_card("a6")])

    texts = ["a1", "a2", "a3", "b1", "a4", "a5", "c1", "c2", "b2", "a6"]
    assert _positions(path, box) == list(range(len(texts)))  # unique (the primary key), no gap
    cards = await second.get_cards((await second.get_box(box)).card_ids)
    assert [c.content for c in cards] == [TextContent(t) for t in texts]
    assert all(c.project_id == "p" for c in cards)
    await first.close()
    await second.close()


async def test_a_failed_append_writes_nothing_and_the_next_one_still_fits(tmp_path: Path) -> None:
    path = tmp_path / "cardbox.sqlite3"
    store = SqliteCardBoxStore(path)
    box = await store.create_box([])
    store.append_to_box_sync(box, [_card("one")])
    with pytest.raises(NotFoundError, match="ghost"):  # an unknown card id: the whole append fails
        store.append_to_box_sync(box, [_card("lost"), "ghost"])
    with pytest.raises(BadRequestError, match="metadata"):  # refused before any transaction
        store.append_to_box_sync(box, [NewCard("t", TextContent("x"), "k", {"bad": object()})])
    existing = await store.add_card(type="t", content="shared", author_id="k")
    ids = store.append_to_box_sync(box, [_card("two"), existing])  # a new card and an existing one
    assert ids[1] == existing
    cards = await store.get_cards((await store.get_box(box)).card_ids)
    assert [c.content for c in cards] == [TextContent("one"), TextContent("two"), TextContent("shared")]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM cards").fetchone()[0] == 3  # "lost" never stayed
    with pytest.raises(NotFoundError, match="nope"):
        store.append_to_box_sync("nope", [_card("x")])
    await store.close()


async def test_a_box_gone_behind_the_stores_back_is_not_found(tmp_path: Path) -> None:
    path = tmp_path / "cardbox.sqlite3"
    store = SqliteCardBoxStore(path)
    box = await store.create_box([])
    store.append_to_box_sync(box, [_card("one")])  # remembered
    with sqlite3.connect(path) as conn:  # e.g. the file restored from an older backup
        conn.execute("DELETE FROM box_cards")
        conn.execute("DELETE FROM boxes")
    with pytest.raises(NotFoundError, match=box):
        store.append_to_box_sync(box, [_card("two")])  # the foreign key fails over to the read
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM cards").fetchone()[0] == 1
    await store.close()
