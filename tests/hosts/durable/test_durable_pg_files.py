"""Context files and failed turns of a Postgres cluster, across machines with separate ``.ship/``.

Two ``shipagent worker`` processes run one after the other from two project directories that
share nothing but ship.json and the database. A tool output spilled to a context file by the
first is paged and grepped by the second, in the next turn of the same chat; a turn that fails
after ``chat_send`` keeps its transcript lines in the database.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import psycopg

from shipagent.chatkeys import ShipPaths
from tests.support.durable import Worker, durable_project, read_jsonl
from tests.support.durable_worker import big_output

CHAT = "spill:1"


def _turn(database: str, chat_key: str, request_id: str, text: str) -> Any:
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=database, application_name="shipagent")
    try:
        options: Any = {
            "workflow_name": "shipagent.turn",
            "queue_name": "shipagent_turns",
            "workflow_id": request_id,
            "queue_partition_key": chat_key,
            "app_version": "shipagent-durable-1",
        }
        return client.enqueue(options, chat_key, text).get_result(polling_interval_sec=0.05)
    finally:
        client.destroy()


def _on_worker(
    project: Path, name: str, signals: Path, turns: list[tuple[str, str, str]], db: str
) -> list[Any]:
    worker = Worker(project, name, SHIPAGENT_TEST_DIR=str(signals))
    try:
        worker.wait_ready()
        return [_turn(db, chat, rid, text) for chat, rid, text in turns]
    finally:
        worker.stop()


def test_a_spill_on_one_worker_is_read_and_grepped_on_another(tmp_path: Path, pg_database: str) -> None:
    one = durable_project(tmp_path / "machine-1", pg_database)
    two = tmp_path / "machine-2"
    two.mkdir()
    shutil.copy(one / "ship.json", two / "ship.json")  # the same configuration, nothing else shared
    signals = tmp_path / "signals"
    signals.mkdir()
    data = big_output("alpha").encode("utf-8")

    (spilled,) = _on_worker(one, "worker-1", signals, [(CHAT, "t1", "big:alpha")], pg_database)
    assert spilled.success, spilled.output
    ref_id = spilled.output.removeprefix("spilled ")
    assert ref_id.startswith("a") and len(ref_id) == 7, spilled.output
    folder_two = ShipPaths(two).context_dir(CHAT)
    assert not folder_two.exists()  # machine 2 has never seen the chat

    start = data.index(b"alpha line 00600")
    limit = data.index(b"alpha line 00610") - start  # ten whole lines, multi-byte characters inside
    read, failed = _on_worker(
        two,
        "worker-2",
        signals,
        [
            (CHAT, "t2", f"read:{ref_id}:{start}:{limit}:line 0077[0-9] "),
            ("send:1", "t3", "sendfail:bye"),
        ],
        pg_database,
    )
    assert read.success, read.output
    page, grep = json.loads(read.output)
    assert page["content"].encode("utf-8") == data[start : start + limit]  # the very bytes worker 1 spilled
    assert (page["offset"], page["nextOffset"], page["totalBytes"]) == (start, start + limit, len(data))
    assert grep["totalMatches"] == 10
    assert [m["line"] for m in grep["matches"]] == list(range(771, 781))  # 1-based line numbers
    assert grep["matches"][0]["content"] == "alpha line 00770 ✓ " + "x" * 20

    requests = read_jsonl(signals / "requests.jsonl")
    pids = {q["text"].split(":")[0]: q["pid"] for q in requests}
    assert pids["big"] != pids["read"]  # two processes, two machines' folders
    # machine 2 now holds its own copy (so ripgrep ran on a local file), byte for byte
    assert (folder_two / f"{ref_id}.txt").read_bytes() == data
    index = [json.loads(line) for line in (folder_two / "index.jsonl").read_text().splitlines()]
    assert [r["id"] for r in index if r["kind"] == "artifact"] == [ref_id]
    assert (ShipPaths(one).context_dir(CHAT) / f"{ref_id}.txt").read_bytes() == data

    with psycopg.connect(pg_database) as conn:
        row = conn.execute(
            "SELECT content FROM shipagent.context_content WHERE chat_key = %s AND ref_id = %s",
            (CHAT, ref_id),
        ).fetchone()
        assert row is not None and bytes(row[0]) == data
        said = conn.execute(
            "SELECT record->>'role', record->>'text', record->>'via' FROM shipagent.transcript"
            " WHERE chat_key = 'send:1' ORDER BY seq"
        ).fetchall()
        turns = conn.execute("SELECT count(*) FROM shipagent.messages WHERE chat_key = 'send:1'").fetchone()
    # the failed turn: not committed, but what chat_send delivered stays in the shared transcript
    assert not failed.success
    assert said == [("user", "sendfail:bye", None), ("assistant", "sent bye", "tool")]
    assert turns == (0,)
    assert not ShipPaths(two).transcript("send:1").exists()
