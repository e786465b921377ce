"""A cluster whose workers share NOTHING but ship.json and the Postgres database.

Two ``shipagent worker`` processes run from two different project directories (each its own
``.ship/``), both configured with the same ``durable.database``. Turns of five chats are queued
concurrently; whichever worker dequeues a turn must see every earlier turn of the chat, also the
ones the other worker ran, because the history is loaded from and committed to Postgres.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from shipagent.chatkeys import ShipPaths
from tests.support.durable import Worker, durable_project, read_jsonl

CHATS, TURNS = 5, 4


def _options(workflow_id: str, chat_key: str) -> Any:
    return {
        "workflow_name": "shipagent.turn",
        "queue_name": "shipagent_turns",
        "workflow_id": workflow_id,
        "queue_partition_key": chat_key,
        "app_version": "shipagent-durable-1",
    }


def _enqueue_all(database: str) -> list[Any]:
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=database, application_name="shipagent")
    try:
        handles = []
        for turn in range(TURNS):  # enqueued in turn order; all before any result is awaited
            for chat in range(CHATS):
                options = _options(f"c{chat}-t{turn}", f"chat:{chat}")
                handles.append(client.enqueue(options, f"chat:{chat}", f"c{chat}-t{turn}"))
        results = [h.get_result(polling_interval_sec=0.05) for h in handles]
        # then chat_load_history, on whichever worker: it reads the transcript from Postgres
        recall = client.enqueue(_options("c0-recall", "chat:0"), "chat:0", "recall:4")
        # and agent_load_context: it reads the agent-context log from Postgres
        recap = client.enqueue(_options("c1-recap", "chat:1"), "chat:1", "recap:2")
        return [
            *results,
            recall.get_result(polling_interval_sec=0.05),
            recap.get_result(polling_interval_sec=0.05),
        ]
    finally:
        client.destroy()


def test_workers_with_separate_project_dirs_share_chats_through_postgres(
    tmp_path: Path, pg_database: str
) -> None:
    one = durable_project(tmp_path / "machine-1", pg_database)
    two = tmp_path / "machine-2"
    two.mkdir()
    shutil.copy(one / "ship.json", two / "ship.json")  # the same configuration, nothing else shared
    shared = tmp_path / "signals"  # where the scripted model records what it was sent
    shared.mkdir()
    workers = [
        Worker(
            project, f"worker-{n}", concurrency=1, SHIPAGENT_TEST_DELAY="0.1", SHIPAGENT_TEST_DIR=str(shared)
        )
        for n, project in ((1, one), (2, two))
    ]
    try:
        for w in workers:
            w.wait_ready()
        time.sleep(1.5)  # each worker's queue thread notices the registered queue within a second
        results = _enqueue_all(pg_database)
    finally:
        for w in workers:
            w.stop()
    assert [(r.success, r.output) for r in results] == [
        *((True, f"echo: c{c}-t{t}") for t in range(TURNS) for c in range(CHATS)),
        (True, "recalled 4"),
        (True, "recapped 2"),
    ]

    # every turn committed exactly once, in order, in every store (rows in Postgres)
    with psycopg.connect(pg_database) as conn:

        def ids(sql: str, chat: int) -> list[str]:
            return [row[0] for row in conn.execute(sql, (f"chat:{chat}",)).fetchall()]

        for chat in range(CHATS):
            expected = [f"c{chat}-t{t}" for t in range(TURNS)] + {0: ["c0-recall"], 1: ["c1-recap"]}.get(
                chat, []
            )
            turns = (
                "SELECT request_id FROM shipagent.messages WHERE chat_key = %s AND kind = 'turn' ORDER BY seq"
            )
            assert ids(turns, chat) == expected
            users = (
                "SELECT record->>'requestId' FROM shipagent.transcript"
                " WHERE chat_key = %s AND record->>'role' = 'user' ORDER BY seq"
            )
            assert ids(users, chat) == expected
            context = (
                "SELECT record->>'requestId' FROM shipagent.agent_context WHERE chat_key = %s ORDER BY seq"
            )
            assert ids(context, chat) == expected
            cards = """SELECT c.metadata::json->>'request_id' FROM shipagent.named_boxes n
                JOIN shipagent.box_cards b ON b.box_id = n.box_id JOIN shipagent.cards c ON c.card_id = b.card_id
                WHERE n.name = 'output:' || %s AND c.metadata::json->>'role' = 'user' ORDER BY b.position"""
            assert ids(cards, chat) == expected
    for project in (one, two):  # nothing of the chats went to either machine's .ship/ files
        paths = ShipPaths(project)
        for chat in range(CHATS):
            assert not paths.message_log(f"chat:{chat}").exists()
            assert not paths.transcript(f"chat:{chat}").exists()

    requests = read_jsonl(shared / "requests.jsonl")
    recall = [q for q in requests if q["text"] == "recall:4"]
    assert [q["phase"] for q in recall] == ["first", "after-tool"]
    loaded = [line for line in recall[1]["said"] if "[Earlier conversation loaded" in line]
    assert len(loaded) == 1  # the last 4 transcript entries before the recall turn, from Postgres
    assert loaded[0].splitlines()[1:] == [
        "user: c0-t2",
        "assistant: echo: c0-t2",
        "user: c0-t3",
        "assistant: echo: c0-t3",
    ], loaded
    recap = [q for q in requests if q["text"] == "recap:2"]
    assert [(q["phase"], len(q["systems"])) for q in recap] == [("first", 0), ("after-tool", 1)]
    block = recap[1]["systems"][0]  # the newest two runs of chat:1, whichever worker ran them
    assert [line for line in block.splitlines() if " request " in line] == [
        line for line in block.splitlines() if line.endswith(("request c1-t2", "request c1-t3"))
    ]
    assert "request c1-t2" in block and "request c1-t3" in block and "c1-t1" not in block
    requests = [q for q in requests if q["text"] not in ("recall:4", "recap:2")]
    assert sorted(q["text"] for q in requests) == sorted(
        f"c{c}-t{t}" for c in range(CHATS) for t in range(TURNS)
    )
    pids = {w.pid for w in workers}
    assert {q["pid"] for q in requests} == pids  # both workers did work
    by_text = {q["text"]: q for q in requests}
    switched = 0
    for chat in range(CHATS):
        runs = [by_text[f"c{chat}-t{t}"] for t in range(TURNS)]
        assert [q["t"] for q in runs] == sorted(q["t"] for q in runs)  # per-chat order kept
        for turn, q in enumerate(runs):  # the model saw every earlier turn, whoever ran it
            earlier = [
                line
                for t in range(turn)
                for line in (f"user: c{chat}-t{t}", f"assistant: echo: c{chat}-t{t}")
            ]
            assert q["said"] == [*earlier, f"user: c{chat}-t{turn}"], (chat, turn)
        switched += sum(a["pid"] != b["pid"] for a, b in itertools.pairwise(runs))
    assert switched > 0  # some turn ran on the other worker than its chat's previous turn


@pytest.mark.anyio
async def test_store_history_window_reads_like_the_file_window(tmp_path: Path) -> None:
    """chat_load_history over a store pages backwards and picks exactly what the file reader picks."""
    from shipagent.store import FileStores
    from shipagent.tools._chat import read_store_window, read_transcript_window

    stores = FileStores(tmp_path)
    for n in range(260):  # 520+ records: windows cross the 200-record pages
        sent = ["note (n)"] if n % 7 == 0 else []
        await stores.transcript.append_turn("c", f"r{n}", f"question {n}", f"answer {n}", sent=sent)
    path = stores.paths.transcript("c")
    for count, offset, keyword in [
        (5, 0, None),
        (30, 190, None),
        (200, 400, None),
        (3, 2, "question 1.5"),
        (9, 0, "note ("),
    ]:
        want = read_transcript_window(path, count=count, offset=offset, keyword=keyword)
        got = await read_store_window(stores.transcript, "c", count=count, offset=offset, keyword=keyword)
        assert got == want, (count, offset, keyword)
        assert got.entries  # each case finds something
    assert (await read_store_window(stores.transcript, "c", count=5, offset=0)).entries[-1][
        "text"
    ] == "answer 259"
    await stores.close()


@pytest.mark.anyio
async def test_commit_replayed_after_a_crash_writes_nothing_twice_and_reloads(
    tmp_path: Path, pg_database: str
) -> None:
    """A commit step that committed and died before DBOS recorded it runs again: no second copy."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models.test import TestModel

    from shipagent import ShipAgent
    from shipagent.agent.turns import TurnCommit
    from shipagent.store import PgStores

    agent = ShipAgent.from_project(tmp_path, model=TestModel())
    stores = PgStores(pg_database)
    new = [ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[TextPart("hello")])]
    turn = TurnCommit("chat:r", "rid-1", "hi", "hello", "hello", [], [], [], new, None)
    try:
        assert await agent._wiring.commit(turn, stores) == (None, None)
        stale = [ModelRequest(parts=[UserPromptPart("stale")])]
        replay = TurnCommit("chat:r", "rid-1", "hi", "hello", "hello", [], [], stale, new, None)
        assert await agent._wiring.commit(replay, stores) == (None, None)
        assert [r.data["requestId"] for r in await stores.messages.records("chat:r")] == ["rid-1"]
        said = [(r.data["role"], r.data["text"]) for r in await stores.transcript.records("chat:r")]
        assert said == [("user", "hi"), ("assistant", "hello")]
        assert len(await stores.agent_context.records("chat:r")) == 1
        # memory is what the database holds, whatever history the replayed step started from
        assert [type(m).__name__ for m in agent.history("chat:r")] == ["ModelRequest", "ModelResponse"]
        assert agent.history("chat:r")[1].parts[0].content == "hello"  # type: ignore[union-attr]
    finally:
        await stores.close()
        await agent.handover.aclose()


@pytest.mark.anyio
async def test_replayed_commit_that_compacted_asks_the_summarizer_once(
    tmp_path: Path, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit is no DBOS step: a resumed turn runs it again; a compaction's summary is not redone."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models.test import TestModel

    from shipagent import ShipAgent
    from shipagent.agent.turns import TurnCommit
    from shipagent.store import PgStores

    (tmp_path / "ship.json").write_text(
        json.dumps(
            {
                "name": "c",
                "context": {"chatHistory": {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2}},
            }
        )
    )
    agent = ShipAgent.from_project(tmp_path, model=TestModel())
    asked: list[int] = []

    async def summary(chat_key: str, history: list[Any]) -> str:
        asked.append(len(history))
        return "the summary"

    monkeypatch.setattr(agent.chats, "_model_summary", summary)
    stores = PgStores(pg_database)
    base = [
        m
        for n in range(2)
        for m in (ModelRequest(parts=[UserPromptPart(f"q{n}")]), ModelResponse(parts=[TextPart(f"a{n}")]))
    ]
    new = [ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[TextPart("hello")])]
    turn = TurnCommit("chat:c", "rid-c", "hi", "hello", "hello", [], [], base, new, None)
    try:
        compaction, failure = await agent._wiring.commit(turn, stores)
        assert failure is None and compaction is not None
        assert await agent._wiring.commit(turn, stores) == (None, None)  # the replay
        assert asked == [6]  # once, by the first attempt
        kinds = [r.data["t"] for r in await stores.messages.records("chat:c")]
        assert kinds == ["turn", "compaction"]  # written once
        assert len(agent.history("chat:c")) == 3  # memory: the summary and the last two messages
    finally:
        await stores.close()
        await agent.handover.aclose()


def test_serve_pages_a_cluster_transcript_from_postgres(tmp_path: Path, pg_database: str) -> None:
    """``serve --no-worker`` on a machine that ran none of the turns shows them, paged by seq."""
    import subprocess

    import anyio
    import httpx
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from shipagent.store import PgStores, TurnWrite
    from shipagent.tools.files import ContextRef
    from tests.support.durable import SHIPAGENT, worker_env
    from tests.support.net import free_port

    async def seed() -> None:
        stores = PgStores(pg_database)
        try:
            for n in range(3):
                new = [
                    ModelRequest(parts=[UserPromptPart(f"q{n}")]),
                    ModelResponse(parts=[TextPart(f"a{n}")]),
                ]
                await stores.commit_turn(TurnWrite("web:alice", f"r{n}", f"q{n}", f"a{n}", new))
            await anyio.sleep(0.01)  # a later record time: carol's chat is the newest
            new = [ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[TextPart("yo")])]
            await stores.commit_turn(TurnWrite("web:carol", "c0", "hi", "yo", new))
            ref = ContextRef(
                "a0b1c2d",
                "artifact",
                "log",
                "",
                0,
                "2026-01-01T00:00:00.000Z",
                "text/plain",
                True,
                "tool:x",
                "a0b1c2d.txt",
            )
            await stores.context_files.put("web:alice", ref, "spilled ✓ bytes\n".encode())
        finally:
            await stores.close()

    anyio.run(seed)
    project = durable_project(tmp_path / "front", pg_database)
    port = free_port()
    args = [SHIPAGENT, "serve", "-C", str(project), "--port", str(port), "--no-worker"]
    args += ["--model-factory", "tests.support.durable_worker:scripted_model"]
    serve = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=worker_env(project)
    )
    base = f"http://127.0.0.1:{port}/v1/chats/web:alice/transcript"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and serve.poll() is None, "serve did not start"
            time.sleep(0.2)
        newest = httpx.get(base, params={"limit": 4}).json()
        older = httpx.get(base, params={"limit": 4, "before": newest["before"]}).json()
        nobody = httpx.get(f"http://127.0.0.1:{port}/v1/chats/web:nobody/transcript").json()
        chats = httpx.get(f"http://127.0.0.1:{port}/v1/chats").json()
        files = httpx.get(f"http://127.0.0.1:{port}/v1/chats/web:alice/context-files").json()
        spilled = httpx.get(f"http://127.0.0.1:{port}/v1/chats/web:alice/context-files/a0b1c2d").json()
        cleared = httpx.delete(f"http://127.0.0.1:{port}/v1/chats/web:alice/context")
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    assert [(e["role"], e["text"]) for e in newest["entries"]] == [
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
        ("assistant", "a2"),
    ]
    assert newest["before"] == 3
    assert [e["text"] for e in older["entries"]] == ["q0", "a0"]
    assert older["before"] is None
    assert (nobody["entries"], nobody["before"]) == ([], None)
    assert [c["chatKey"] for c in chats["chats"]] == ["web:carol", "web:alice"]  # newest first
    assert [(f["id"], f["sizeBytes"]) for f in files["files"]] == [("a0b1c2d", 18)]
    assert (spilled["content"], spilled["size"], spilled["done"]) == ("spilled ✓ bytes\n", 18, True)
    assert not ShipPaths(project).transcript("web:alice").exists()  # not a copy in this machine's files
    assert cleared.json() == {"chatKey": "web:alice", "cleared": True}

    async def after_clear() -> tuple[list[Any], list[str]]:
        stores = PgStores(pg_database)
        try:
            kinds = [r.data["t"] for r in await stores.messages.records("web:alice")]
            return await stores.messages.rebuild("web:alice"), kinds
        finally:
            await stores.close()

    # /clear went to the database, where every worker's next turn of the chat looks
    assert anyio.run(after_clear) == ([], ["turn", "turn", "turn", "compaction"])
    assert not ShipPaths(project).message_log("web:alice").exists()
