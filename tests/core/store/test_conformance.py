"""One suite, three ChatStore backends: ``.ship/`` files, memory, Postgres.

Every backend must give a turn back as it was committed, hold each part of a turn once however
often the turn is committed (a retry, a replayed durable step), compact with expandable
summaries and the compacted messages kept as a ``history`` context file, keep chats apart under
concurrency, finish a commit that stopped between its parts, clear a chat, keep the
``chat_send`` lines of a turn that did not commit, record who said a user line (and nothing for a
turn without a sender) and an answer that was never delivered. Postgres runs on the throwaway cluster of the
durable tests (skipped only where its binaries are absent).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from shipagent import Sender
from shipagent.store import ChatStore, FileStores, MemoryStores, PgStores, TurnRecord
from shipagent.window.compaction import compact, is_summary

pytestmark = pytest.mark.anyio

KEY = "api:chat:alice"


@pytest.fixture(params=["files", "memory", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    made: Any
    if request.param == "files":
        made = FileStores(tmp_path)
    elif request.param == "memory":
        made = MemoryStores()
    else:
        made = PgStores(request.getfixturevalue("pg_database"))
    assert isinstance(made, ChatStore)
    try:
        yield made
    finally:
        await made.close()


_EXCHANGES: dict[int, list[ModelMessage]] = {}


def exchange(n: int) -> list[ModelMessage]:
    """Turn ``n``'s messages (the same objects every time: they carry timestamps)."""
    if n not in _EXCHANGES:
        _EXCHANGES[n] = [
            ModelRequest(parts=[UserPromptPart(f"question {n}")]),
            ModelResponse(parts=[TextPart(f"answer {n}")]),
        ]
    return _EXCHANGES[n]


async def next_record(
    store: Any, key: str, n: int, *, bound: int = 1000, keep: int = 2, overflowed: bool = False
) -> tuple[TurnRecord, list[str]]:
    """The record of turn ``n`` as the agent builds it: numbered, compacted before the write.

    ``overflowed``: the run only fit on a compacted history (a base compaction).
    Returns the record and the sources of the history after it.
    """
    loaded = await store.load(key)
    base, before = loaded.messages, loaded.sources
    base_compaction = None
    removed: list[list[ModelMessage]] = []
    if overflowed:
        base_compaction = compact(base, keep, sources=before)
        assert base_compaction is not None
        removed.append(base_compaction.removed)
        base, before = base_compaction.history, base_compaction.sources(before)
    new = exchange(n)
    sources = [*before, *(f"history:{loaded.next_seq + i}" for i in range(len(new)))]
    history = [*base, *new]
    done = compact(history, keep, sources=sources) if len(history) > bound else None
    if done is not None:
        removed.append(done.removed)
    record = TurnRecord(
        key,
        f"r{n}",
        f"question {n}",
        f"answer {n}",
        new,
        sent=[f"sent {n}"],
        tool_calls=[{"tool": "chat_send", "success": True, "error": None}],
        base_compaction=base if base_compaction is not None else None,
        compaction=done.history if done is not None else None,
        seq=loaded.next_seq,
        base_sources=before if base_compaction is not None else None,
        compaction_sources=done.sources(sources) if done is not None else None,
        removed=removed,
    )
    return record, done.sources(sources) if done is not None else sources


async def held(store: Any, key: str) -> dict[str, list[Any]]:
    """What each part holds for the chat: request ids, per part."""
    box = await store.cards.get_box(await store.cards.named_box(f"output:{key}"))
    cards = await store.cards.get_cards(box.card_ids)
    return {
        "messages": [(r.data["t"], r.data["requestId"]) for r in await store.messages.records(key)],
        "transcript": [(r.data["requestId"], r.data["text"]) for r in await store.transcript.records(key)],
        "agentContext": [r.data["requestId"] for r in await store.agent_context.records(key)],
        "cards": [(c.metadata["request_id"], c.metadata["role"]) for c in cards],
        "history": [r.description for r in await store.context_files.list(key) if r.kind == "history"],
    }


async def test_commit_then_reload(store: Any) -> None:
    for n in range(3):
        record, _ = await next_record(store, KEY, n)
        report = await store.commit(record)
        assert report.failed == {} and not report.replayed
        assert len(report.card_ids) == 2
    loaded = await store.load(KEY)
    assert loaded.messages == [m for n in range(3) for m in exchange(n)]
    assert loaded.sources == [f"history:{i}" for i in range(6)] and loaded.next_seq == 6
    parts = await held(store, KEY)
    assert [rid for t, rid in parts["messages"]] == ["r0", "r1", "r2"]
    assert parts["transcript"][:3] == [("r0", "question 0"), ("r0", "sent 0"), ("r0", "answer 0")]
    assert parts["agentContext"] == ["r0", "r1", "r2"]
    assert parts["cards"][:2] == [("r0", "user"), ("r0", "assistant")]
    page = (await store.transcript_page(KEY, None, 2)).entries
    assert [e["text"] for e in page] == ["sent 2", "answer 2"]
    assert (await store.load("api:chat:nobody")).messages == []


async def test_transcript_pages_walk_back_by_the_stores_own_cursor_to_the_start(store: Any) -> None:
    for n in range(4):
        await store.commit((await next_record(store, KEY, n))[0])
    texts: list[str] = []
    before: int | None = None
    pages = 0
    while True:
        page = await store.transcript_page(KEY, before, 5)
        texts = [e["text"] for e in page.entries] + texts
        pages += 1
        if page.before is None:
            break
        before = page.before
    assert texts == [t for n in range(4) for t in (f"question {n}", f"sent {n}", f"answer {n}")]
    assert pages == 3  # 12 lines, 5 a page: nothing read twice, nothing left out
    empty = await store.transcript_page("api:chat:nobody", None, 5)
    assert (empty.entries, empty.before) == ([], None)


async def test_list_chats_names_every_chat_newest_first(store: Any) -> None:
    assert await store.list_chats() == []
    for key in ("api:chat:old", "api:chat:new"):
        await store.commit((await next_record(store, key, 0))[0])
        await anyio.sleep(0.02)  # the files' mtimes and the records' times tell them apart
    assert [c.chat_key for c in await store.list_chats()] == ["api:chat:new", "api:chat:old"]


async def test_recommitting_a_request_id_holds_every_part_once(store: Any) -> None:
    record, _ = await next_record(store, KEY, 0)
    await store.commit(record)
    once = await held(store, KEY)
    for _ in range(2):
        again = await store.commit(record)
        assert again.replayed and again.written == [] and again.card_ids == []
    assert await held(store, KEY) == once
    assert (await store.load(KEY)).messages == exchange(0)


async def test_compaction_base_and_triggered_keep_sources_and_expand(store: Any) -> None:
    for n in range(4):
        record, _ = await next_record(store, KEY, n)
        await store.commit(record)
    record, after = await next_record(store, KEY, 4, bound=9)  # 10 messages: compacts to the last 2
    assert record.compaction is not None
    await store.commit(record)
    loaded = await store.load(KEY)
    assert loaded.messages == record.compaction and loaded.sources == after
    assert is_summary(loaded.messages[0]) and loaded.sources[1:] == ["history:8", "history:9"]
    summary = loaded.sources[0].removeprefix("summary:")
    assert await store.expand(KEY, summary) == [m for n in range(4) for m in exchange(n)]
    assert len((await held(store, KEY))["history"]) == 1

    record, _ = await next_record(store, KEY, 5, overflowed=True, keep=1)  # the run fit only compacted
    assert record.base_compaction is not None
    await store.commit(record)
    await store.commit(record)  # replayed: nothing twice
    parts = await held(store, KEY)
    assert [t for t, rid in parts["messages"] if rid == "r5"] == ["compaction", "turn"]
    assert len(parts["history"]) == 2
    loaded = await store.load(KEY)
    assert loaded.messages == [*record.base_compaction, *exchange(5)]
    assert loaded.next_seq == 12 and loaded.sources[-2:] == ["history:10", "history:11"]
    newest = loaded.sources[0].removeprefix("summary:")
    assert newest != summary and await store.expand(KEY, newest)
    with pytest.raises(KeyError):
        await store.expand(KEY, "no-such-summary")


async def test_concurrent_chats_stay_apart(store: Any) -> None:
    keys = [f"api:chat:{name}" for name in ("a", "b", "c", "d")]

    async def chat(key: str) -> None:
        for n in range(4):
            record, _ = await next_record(store, key, n)
            await store.commit(record)

    async with anyio.create_task_group() as group:
        for key in keys:
            group.start_soon(chat, key)
    for key in keys:
        loaded = await store.load(key)
        assert loaded.messages == [m for n in range(4) for m in exchange(n)]
        parts = await held(store, key)
        assert parts["agentContext"] == ["r0", "r1", "r2", "r3"]
        assert len(parts["transcript"]) == 12 and len(parts["cards"]) == 8


@pytest.mark.parametrize("part", ["messages", "transcript", "agentContext", "cards"])
async def test_a_commit_stopped_between_its_parts_is_completed_by_the_next(store: Any, part: str) -> None:
    first, _ = await next_record(store, KEY, 0)
    await store.commit(first)
    record, _ = await next_record(store, KEY, 1)
    calls: list[str] = []

    def crash(name: str) -> None:
        calls.append(name)
        if name == part:
            raise OSError(f"disk gone while writing {name}")

    store.fault = crash
    try:
        report = await store.commit(record)
    except OSError:  # the message log failed, or the backend writes a turn in one transaction
        pass
    else:
        assert list(report.failed) == [part] and "messages" in report.written
    store.fault = None
    await store.commit(record)  # the retry
    await store.commit(record)  # and once more
    parts = await held(store, KEY)
    assert [rid for t, rid in parts["messages"]] == ["r0", "r1"]
    assert parts["transcript"] == [
        (rid, text)
        for n, rid in enumerate(["r0", "r1"])
        for text in (f"question {n}", f"sent {n}", f"answer {n}")
    ]
    assert parts["agentContext"] == ["r0", "r1"]
    assert parts["cards"] == [("r0", "user"), ("r0", "assistant"), ("r1", "user"), ("r1", "assistant")]
    assert (await store.load(KEY)).messages == [*exchange(0), *exchange(1)]


async def test_clear_starts_afresh_and_the_seqs_go_on(store: Any) -> None:
    for n in range(2):
        record, _ = await next_record(store, KEY, n)
        await store.commit(record)
    await store.clear(KEY, "clear-1")
    loaded = await store.load(KEY)
    assert loaded.messages == [] and loaded.next_seq == 4
    record, _ = await next_record(store, KEY, 2)
    await store.commit(record)
    loaded = await store.load(KEY)
    assert loaded.messages == exchange(2) and loaded.sources == ["history:4", "history:5"]
    said = [r.data["text"] for r in await store.transcript.records(KEY)]
    assert said[:3] == ["question 0", "sent 0", "answer 0"]  # what was said stays


async def test_keep_sent_keeps_a_failed_turns_lines_once(store: Any) -> None:
    for _ in range(2):
        await store.keep_sent(KEY, "failed-1", "do it", ["on it", "half done"])
    await store.keep_sent(KEY, "failed-2", "nothing said", [])
    said = [(r.data["requestId"], r.data["text"]) for r in await store.transcript.records(KEY)]
    assert said == [("failed-1", "do it"), ("failed-1", "on it"), ("failed-1", "half done")]
    assert (await store.load(KEY)).messages == []


async def test_the_sender_of_a_user_line_round_trips(store: Any) -> None:
    plain, _ = await next_record(store, KEY, 0)
    await store.commit(plain)
    spoken, _ = await next_record(store, KEY, 1)
    spoken.sender = Sender("7", "Ada Lovelace")
    await store.commit(spoken)
    await store.keep_sent(KEY, "failed-1", "and you?", ["thinking"], sender=Sender("8"))
    lines = (await store.transcript_page(KEY, None, 100)).entries
    users = [line for line in lines if line["role"] == "user"]
    assert [(u["requestId"], u["text"], u.get("sender")) for u in users] == [
        ("r0", "question 0", None),  # a turn without a sender: no field at all
        ("r1", "question 1", {"id": "7", "name": "Ada Lovelace"}),
        ("failed-1", "and you?", {"id": "8"}),
    ]
    assert [Sender.from_json(u.get("sender")) for u in users] == [
        None,
        Sender("7", "Ada Lovelace"),
        Sender("8"),
    ]
    assert all("sender" not in line for line in lines if line["role"] != "user")


async def test_an_undelivered_answer_is_a_transcript_line(store: Any) -> None:
    record, _ = await next_record(store, KEY, 0)
    await store.commit(record)
    await store.note_undelivered(KEY, "r0", "the chat refused the message: blocked")
    last = (await store.transcript_page(KEY, None, 1)).entries[0]
    assert (last["requestId"], last["role"], last["event"], last["text"]) == (
        "r0",
        "system",
        "undelivered",
        "the chat refused the message: blocked",
    )
    record, _ = await next_record(store, KEY, 1)  # the chat goes on
    await store.commit(record)
    assert (await store.load(KEY)).messages == exchange(0) + exchange(1)
