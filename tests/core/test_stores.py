"""Conformance of every store implementation: in-memory fake, ``.ship/`` files, Postgres.

Each test runs against all three through the ``stores`` fixture (Postgres: the throwaway cluster
of ``_durable_env``, or ``SHIPAGENT_TEST_DATABASE_URL``; never skipped under ``CI=true``), so a
behaviour the runtime relies on holds whichever store a project uses.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from shipagent import jsonl
from shipagent.errors import NotFoundError
from shipagent.store import (
    AgentContextStore,
    Committed,
    ContextFileStore,
    FileStores,
    MemoryStores,
    MessageLogStore,
    PgStores,
    Stores,
    TranscriptStore,
    TurnWrite,
)
from shipagent.store.logs import dump_messages
from shipagent.tools.files import ContextRef
from shipagent.tools.handover import NewCard, TextContent

pytestmark = pytest.mark.anyio

HOSTILE_KEYS = [
    "'; DROP TABLE shipagent.messages; --",
    "robert'); DELETE FROM shipagent.transcript WHERE ('1'='1",
    "%s %(x)s {0} $1",
    "../../etc/passwd",
    "a/b\\c:d",
    "emoji 🚢 ключ 键",
]


@pytest.fixture(params=["memory", "files", "postgres"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    made: Any
    if request.param == "memory":
        made = MemoryStores(window=4)
    elif request.param == "files":
        made = FileStores(tmp_path / "project", window=4)
    else:
        made = PgStores(request.getfixturevalue("pg_database"), window=4)
    try:
        yield made
    finally:
        await made.close()


AT = datetime(2026, 11, 23, 1, 2, 3, tzinfo=UTC)


def exchange(question: str, reply: str) -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(question, timestamp=AT)]),
        ModelResponse(parts=[TextPart(reply)], timestamp=AT),
    ]


def ref(ref_id: str, *, kind: str = "artifact", path: str | None = None) -> ContextRef:
    return ContextRef(
        id=ref_id,
        kind=kind,  # type: ignore[arg-type]
        name=f"file {ref_id}",
        description="",
        size_bytes=0,
        created_at="2026-11-23T00:00:00.000Z",
        mime="text/plain",
        eager=True,
        source="test",
        path=path or f"{ref_id}.txt",
    )


async def test_every_implementation_satisfies_the_protocols(stores: Any) -> None:
    assert isinstance(stores, Stores)
    assert isinstance(stores.messages, MessageLogStore)
    assert isinstance(stores.transcript, TranscriptStore)
    assert isinstance(stores.agent_context, AgentContextStore)
    assert isinstance(stores.context_files, ContextFileStore)


async def test_message_log_seqs_compaction_and_rebuild(stores: Any) -> None:
    log = stores.messages
    assert await log.last_committed("c") == Committed(0, None)
    assert await log.rebuild("c") == []
    assert await log.append_turn("c", "r1", exchange("q1", "a1")) == 1
    assert await log.append_turn("c", "r2", exchange("q2", "a2")) == 2
    summary = [ModelRequest(parts=[UserPromptPart("summary of q1 q2", timestamp=AT)])]
    assert await log.append_compaction("c", "r2", summary) == 3
    assert await log.append_turn("c", "r3", exchange("q3", "a3")) == 4
    assert await log.last_committed("c") == Committed(4, "r3")
    rebuilt = await log.rebuild("c")
    assert dump_messages(rebuilt) == dump_messages([*summary, *exchange("q3", "a3")])
    middle = await log.records("c", 2, 4)
    assert [(r.seq, r.data["t"], r.data["requestId"]) for r in middle] == [
        (2, "turn", "r2"),
        (3, "compaction", "r2"),
    ]
    first = (await log.records("c", 1, 2))[0].data
    assert list(first) == ["t", "ts", "requestId", "messages"]  # the JSONL record, field for field
    assert first["messages"] == dump_messages(exchange("q1", "a1"))
    assert await log.count("c") == 4 and await log.count("other") == 0
    assert await log.chat_keys() == ["c"]
    await log.append_compaction("c", "reset", [])  # /reset: the model context starts afresh
    assert await log.rebuild("c") == []


async def test_transcript_turn_order_last_and_pages(stores: Any) -> None:
    t = stores.transcript
    assert await t.append_turn("c", "r1", "hello", "final answer", sent=["working…", "half way"]) == 4
    assert await t.append_turn("c", "r2", "again", "") == 5  # no answer text: only the user line
    rows = [r.data for r in await t.records("c")]
    assert [(r["role"], r["text"], r.get("via")) for r in rows] == [
        ("user", "hello", None),
        ("assistant", "working…", "tool"),
        ("assistant", "half way", "tool"),
        ("assistant", "final answer", None),
        ("user", "again", None),
    ]
    assert list(rows[0]) == ["v", "ts", "chatKey", "requestId", "role", "text"]
    assert [r["text"] for r in await t.last("c", 2)] == ["final answer", "again"]
    assert [r["text"] for r in await t.last("c", 2, skip=1)] == ["half way", "final answer"]
    newest = await t.page_before("c", None, 2)
    assert [r.seq for r in newest] == [4, 5]
    older = await t.page_before("c", newest[0].seq, 2)
    assert [r.seq for r in older] == [2, 3]
    assert [r.seq for r in await t.page_before("c", older[0].seq, 10)] == [1]
    assert await t.page_before("c", 1, 10) == []


async def test_agent_context_window_merges_the_oldest(stores: Any) -> None:
    ctx = stores.agent_context
    for i in range(6):
        calls = [{"tool": "exec_shell", "success": i % 2 == 0, "error": None if i % 2 == 0 else "x" * 500}]
        await ctx.append("c", f"r{i}", f"question {i}", f"answer {i}", calls)
    entries = await ctx.last("c", 10)
    assert len(entries) == 4  # window 4: one summary + the newest 3
    assert entries[0]["summary"] is True and entries[0]["runs"] == 3
    # As AgentContextLog does: the tools of runs already inside an earlier summary are not recounted.
    assert entries[0]["outputPreview"] == "Tools used in those runs: exec_shell×1"
    assert [e["requestId"] for e in entries[1:]] == ["r3", "r4", "r5"]
    assert len(entries[1]["toolCalls"][0]["error"]) == 200
    assert [r.seq for r in await ctx.records("c")] == [1, 2, 3, 4]
    assert await ctx.count("c") == 4  # after the window rewrote the log, not the 6 ever appended


async def test_agent_context_window_holds_over_many_runs(stores: Any) -> None:
    ctx = stores.agent_context
    for i in range(11):  # window 4: every run after the fourth merges the oldest into the summary
        await ctx.append("c", f"r{i}", f"question {i}", f"answer {i}", [{"tool": "t", "success": True}])
        assert await ctx.count("c") == min(i + 1, 4)
    entries = await ctx.last("c", 10)
    assert entries[0]["summary"] is True and entries[0]["runs"] == 8 and entries[0]["requestId"] == "r7"
    assert [e["requestId"] for e in entries[1:]] == ["r8", "r9", "r10"]
    assert [r.seq for r in await ctx.records("c")] == [1, 2, 3, 4]
    await ctx.append("other", "o1", "q", "a", [])  # another chat's log is its own
    assert [r.data["requestId"] for r in await ctx.records("other")] == ["o1"]
    assert await ctx.count("c") == 4


async def test_context_files_index_contents_paging_and_rewrites(stores: Any) -> None:
    files = stores.context_files
    text = "".join(f"line {i} ünïcödé 🚢\n" for i in range(2000))
    stored = await files.put("c", ref("a1"), text.encode())
    assert stored.size_bytes == len(text.encode())
    await files.put("c", ref("catalog", kind="catalog", path="catalog.md"), b"old catalog")
    await files.put("c", ref("catalog", kind="catalog", path="catalog.md"), b"new catalog")
    assert [r.id for r in await files.list("c")] == ["a1", "catalog"]
    assert [r["id"] for r in await files.index("c")] == ["a1", "catalog", "catalog"]
    assert await files.content("c", "catalog") == b"new catalog"
    assert await files.text("c", "a1") == text
    page = await files.read("c", "a1", 0, 100)
    assert text.encode().startswith(page.content.encode()) and page.next_offset <= 100
    inside = await files.read("c", "a1", 14, 10)  # byte 14 is inside "ö": moved back to its start
    assert inside.offset == 13 and inside.content.startswith("ödé")
    whole = b""
    offset = 0
    while True:
        chunk = await files.read("c", "a1", offset, 4096)
        whole += chunk.content.encode()
        if chunk.done:
            break
        offset = chunk.next_offset
    assert whole == text.encode()
    tail = await files.tail("c", "a1", 2)
    assert tail.content == "line 1998 ünïcödé 🚢\nline 1999 ünïcödé 🚢\n" and tail.lines == 2
    with pytest.raises(NotFoundError, match="'nope' not found"):
        await files.get("c", "nope")
    with pytest.raises(NotFoundError):
        await files.get("other", "a1")  # another chat's ids are not visible
    assert await files.chat_keys() == ["c"]


async def test_cards_and_boxes(stores: Any) -> None:
    cards = stores.cards
    box = await cards.named_box("output:c")
    assert await cards.named_box("output:c") == box
    ids = await cards.append_to_box(box, [NewCard("chat.message", TextContent("hi"), "c", {"role": "user"})])
    card = await cards.add_card(
        type="note", content={"k": ["v", 1]}, author_id="t", metadata={"role": "system"}
    )
    assert await cards.append_to_box(box, [card]) == [card]
    got = await cards.get_cards([card, ids[0]])
    assert [c.card_id for c in got] == [card, ids[0]]
    assert (await cards.get_box(box)).card_ids == [ids[0], card]
    with pytest.raises(NotFoundError, match="card 'missing' not found"):
        await cards.append_to_box(box, ["missing"])
    assert (await cards.get_box(box)).card_ids == [ids[0], card]  # the failed append wrote nothing
    with pytest.raises(NotFoundError, match="box 'nobox' not found"):
        await cards.get_box("nobox")


async def test_commit_turn_writes_every_store(stores: Any) -> None:
    turn = TurnWrite(
        chat_key="c",
        request_id="r1",
        user_text="do it",
        output="done",
        messages=exchange("do it", "done"),
        sent=["on it"],
        tool_calls=[{"tool": "chat_send", "success": True, "error": None}],
        base_compaction=[ModelRequest(parts=[UserPromptPart("earlier, compacted")])],
        said="done (as said)",
    )
    card_ids = await stores.commit_turn(turn)
    assert [r.data["t"] for r in await stores.messages.records("c")] == ["compaction", "turn"]
    assert await stores.messages.last_committed("c") == Committed(2, "r1")
    assert [r["text"] for r in await stores.transcript.last("c", 10)] == ["do it", "on it", "done (as said)"]
    (entry,) = await stores.agent_context.last("c", 10)
    assert entry["outputPreview"] == "done"
    assert entry["toolCalls"] == [{"tool": "chat_send", "success": True, "error": None}]
    box = await stores.cards.get_box(await stores.cards.named_box("output:c"))
    assert box.card_ids == card_ids
    cards = await stores.cards.get_cards(card_ids)
    assert [(c.role, c.content.text, c.metadata["request_id"]) for c in cards] == [  # type: ignore[union-attr]
        ("user", "do it", "r1"),
        ("assistant", "done", "r1"),
    ]


async def test_commit_turn_twice_leaves_the_turn_once(stores: Any, request: pytest.FixtureRequest) -> None:
    first = await stores.commit_turn(turn := TurnWrite("c", "r1", "q", "a", exchange("q", "a"), sent=["s"]))
    assert len(first) == 2
    assert await stores.commit_turn(turn) == []  # a retry, a replayed step: nothing written twice
    counts = [
        await stores.messages.count("c"),
        await stores.transcript.count("c"),
        await stores.agent_context.count("c"),
    ]
    assert counts == [1, 3, 1]
    assert len((await stores.cards.get_box(await stores.cards.named_box("output:c"))).card_ids) == 2
    if "postgres" in request.node.name:
        return  # one transaction: a half-written turn cannot exist there
    # Files and memory write store after store: a crash after the message log leaves the rest to do.
    await stores.messages.append_turn("c", "r2", exchange("q2", "a2"))
    written = await stores.commit_turn(TurnWrite("c", "r2", "q2", "a2", exchange("q2", "a2")))
    assert len(written) == 2
    assert [r.data["requestId"] for r in await stores.messages.records("c")] == ["r1", "r2"]
    assert [r["requestId"] for r in await stores.transcript.last("c", 10)] == ["r1"] * 3 + ["r2"] * 2
    assert [r["requestId"] for r in await stores.agent_context.last("c", 10)] == ["r1", "r2"]


async def test_unicode_and_huge_payloads_come_back_whole(stores: Any) -> None:
    big = ('Ω≈ç√∫ 🚢 \u0000 nul, \u2028 line sep, "quotes" \\ back\n' * 40000)[: 3 * 1024 * 1024]
    await stores.messages.append_turn("ключ 🚢", "r-ü", exchange(big, big))
    await stores.transcript.append_turn("ключ 🚢", "r-ü", big, big)
    (record,) = await stores.messages.records("ключ 🚢")
    assert record.data["messages"] == dump_messages(exchange(big, big))
    assert [r["text"] for r in await stores.transcript.last("ключ 🚢", 5)] == [big, big]
    data = big.encode() + b"\xff\xfe not utf-8"
    await stores.context_files.put("ключ 🚢", ref("big"), data)
    assert await stores.context_files.content("ключ 🚢", "big") == data
    assert (await stores.context_files.text("ключ 🚢", "big")).endswith("\ufffd\ufffd not utf-8")


async def test_hostile_chat_keys_are_data(stores: Any) -> None:
    await stores.messages.append_turn("innocent", "r0", exchange("q", "a"))
    for i, key in enumerate(HOSTILE_KEYS):
        await stores.commit_turn(TurnWrite(key, f"r{i}", f"text of {key}", "ok", exchange(key, "ok")))
        await stores.context_files.put(key, ref("f1"), key.encode())
    for i, key in enumerate(HOSTILE_KEYS):
        assert await stores.messages.last_committed(key) == Committed(1, f"r{i}")
        assert (await stores.transcript.last(key, 1))[0]["text"] == "ok"
        assert (await stores.transcript.last(key, 2))[0]["chatKey"] == key
        assert await stores.context_files.content(key, "f1") == key.encode()
    assert sorted(await stores.messages.chat_keys()) == sorted([*HOSTILE_KEYS, "innocent"])
    assert await stores.messages.count("innocent") == 1  # nothing dropped or deleted


async def test_concurrent_appends_get_distinct_seqs_in_order(stores: Any) -> None:
    import anyio

    async def one(i: int) -> None:
        await stores.transcript.append_records("c", [{"n": i, "part": 0}, {"n": i, "part": 1}])

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
    rows = await stores.transcript.records("c")
    assert [r.seq for r in rows] == list(range(1, 41))
    by_n: dict[int, list[int]] = {}
    for r in rows:
        by_n.setdefault(r.data["n"], []).append(r.seq)
    assert all(b == a + 1 for a, b in by_n.values())  # one call's records stay together, in order


async def test_file_stores_write_what_the_runtime_writes(tmp_path: Path) -> None:
    """The default stores are the runtime's files: records read back are the file's lines."""
    stores = FileStores(tmp_path, window=4)
    await stores.commit_turn(TurnWrite("k:1", "r1", "q", "a", exchange("q", "a"), sent=["s"]))
    paths = stores.paths
    assert [r.data for r in await stores.messages.records("k:1")] == jsonl.read_all(paths.message_log("k:1"))
    assert [r.data for r in await stores.transcript.records("k:1")] == jsonl.read_all(paths.transcript("k:1"))
    raw = paths.transcript("k:1").read_bytes().decode()
    assert raw.count("\n") == 3 and json.loads(raw.splitlines()[1])["via"] == "tool"
    assert (tmp_path / ".ship" / "cardbox.sqlite3").exists()
    await stores.close()


def test_open_stores_follows_ship_json_durable_database(tmp_path: Path) -> None:
    from shipagent.config import ShipConfig
    from shipagent.store import open_stores

    plain = ShipConfig.model_validate({"name": "p"})
    assert isinstance(open_stores(tmp_path, plain), FileStores)
    sqlite = ShipConfig.model_validate({"name": "p", "durable": {"enabled": True, "database": "sqlite"}})
    assert isinstance(open_stores(tmp_path, sqlite), FileStores)
    url = "postgresql://u@127.0.0.1:5432/db"
    off = ShipConfig.model_validate({"name": "p", "durable": {"enabled": False, "database": url}})
    assert isinstance(open_stores(tmp_path, off), FileStores)
    cluster = ShipConfig.model_validate(
        {
            "name": "p",
            "durable": {"enabled": True, "database": url},
            "context": {"agentContext": {"windowEntries": 7}},
        }
    )
    stores = open_stores(tmp_path, cluster)
    assert isinstance(stores, PgStores) and stores.pool.url == url
    assert stores.agent_context.window == 7 and stores.cards.project_id == "p"


async def test_file_logs_skip_a_torn_last_line_and_keep_counting(tmp_path: Path) -> None:
    """A crash mid-append leaves a torn line: it is no record, and the next append starts afresh."""
    stores = FileStores(tmp_path)
    await stores.messages.append_turn("k", "r1", exchange("q1", "a1"))
    assert await stores.messages.last_committed("k") == Committed(1, "r1")
    log = stores.paths.message_log("k")
    log.write_bytes(log.read_bytes() + b'{"t":"turn","requestId":"torn","messa')
    assert await stores.messages.last_committed("k") == Committed(1, "r1")
    assert await stores.messages.append_turn("k", "r2", exchange("q2", "a2")) == 2
    assert await stores.messages.last_committed("k") == Committed(2, "r2")
    assert [r.data["requestId"] for r in await stores.messages.records("k")] == ["r1", "r2"]
    assert dump_messages(await stores.messages.rebuild("k")) == dump_messages(
        [*exchange("q1", "a1"), *exchange("q2", "a2")]
    )
    await stores.close()
