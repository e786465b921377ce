"""Damaged stores found by fault injection: each must stay readable and the chat must go on.

- a message-log line that is JSON but not a record is skipped with a warning, like a torn line;
- a wrong-shape agent-context line never crashes the window rewrite (which runs inside a commit);
- an interrupted atomic rewrite's temp file is removed when the store is next opened;
- a turn in the message log but missing from the transcript / agent-context log (a kill between
  the appends) is recovered, marked ``recovered``, when the chat is hydrated.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shipagent import ShipAgent
from shipagent.store.files import _store
from shipagent.store.reconcile import reconcile
from tests.support.core import ScriptedModel, dump, make_project, read_jsonl, user_texts

pytestmark = pytest.mark.anyio
KEY = "api:chat:faults"


def agent_for(root: Path, **ship: Any) -> tuple[ShipAgent, ScriptedModel]:
    make_project(root, ship or None)
    model = ScriptedModel()
    return ShipAgent.from_project(root, model=model.model), model


def append_raw(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")


BAD_RECORDS = [
    '{"t":"turn"}',
    '{"t":"turn","messages":"oops"}',
    '{"t":"turn","requestId":"x","messages":[{"kind":"telepathy","parts":[]}]}',
    '{"t":"compaction","requestId":"y","history":[{"kind":"request","parts":[{"part_kind":"hologram"}]}]}',
    '{"t":"compaction"}',
    '{"t":"turn","messages":[42]}',
]


@pytest.mark.parametrize("bad", BAD_RECORDS)
async def test_an_invalid_message_log_record_is_skipped_and_the_chat_continues(
    tmp_path: Path, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    agent, _ = agent_for(tmp_path)
    assert (await agent.run(KEY, "one")).success
    append_raw(agent.chats.log.path(KEY), bad)

    fresh, model = agent_for(tmp_path)
    with caplog.at_level(logging.WARNING, logger="shipagent.window"):
        history = fresh.history(KEY)
    assert user_texts(history) == ["one"]
    assert any("skipping a" in r.message and "not valid" in r.message for r in caplog.records)

    result = await fresh.run(KEY, "two")
    assert result.success, result.output
    assert result.output == "echo: two"
    assert user_texts(model.requests[-1]) == ["one", "two"]  # the model saw the whole good history
    again, _ = agent_for(tmp_path)
    assert dump(again.history(KEY)) == dump(fresh.history(KEY))


async def test_a_damaged_compaction_record_falls_back_to_the_turns_before_it(tmp_path: Path) -> None:
    agent, _ = agent_for(
        tmp_path, context={"chatHistory": {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2}}
    )
    for text in ("a", "b", "c"):
        assert (await agent.run(KEY, text)).success
    log_path = agent.chats.log.path(KEY)
    records = read_jsonl(log_path)
    assert [r["t"] for r in records].count("compaction") >= 1
    # damage the newest compaction record: the history is rebuilt from the older records
    newest = max(i for i, r in enumerate(records) if r["t"] == "compaction")
    records[newest]["history"] = "oops"
    log_path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    fresh, _ = agent_for(tmp_path)
    assert user_texts(fresh.history(KEY))[-1] == "c"
    assert (await fresh.run(KEY, "d")).success


@pytest.mark.parametrize(
    "bad", ["42", '"text"', "[1,2]", '{"toolCalls":5}', '{"toolCalls":[7,{"tool":3}]}', '{"runs":"x"}']
)
async def test_wrong_shape_agent_context_lines_never_fail_a_turn(tmp_path: Path, bad: str) -> None:
    agent, _ = agent_for(tmp_path, context={"agentContext": {"windowEntries": 3}})
    path = agent.agent_context.path(KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    append_raw(path, bad)
    append_raw(path, bad)
    results = [await agent.run(KEY, f"turn {i}") for i in range(5)]
    assert [r.success for r in results] == [True] * 5, [r.output for r in results]
    entries = read_jsonl(path)  # every line parses: the rewrite dropped the bad ones
    assert all(isinstance(e, dict) for e in entries)
    assert len(entries) <= 3
    assert entries[-1]["userPreview"] == "turn 4"
    assert entries[0].get("summary") is True
    # the transcript has each turn exactly once: no turn was reported failed and retried
    said = [e["text"] for e in read_jsonl(agent.transcript.path(KEY)) if e["role"] == "user"]
    assert said == [f"turn {i}" for i in range(5)]


def _dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(proc.stdout)


async def test_stale_temp_files_of_interrupted_rewrites_are_removed_on_open(tmp_path: Path) -> None:
    agent, _ = agent_for(tmp_path, context={"agentContext": {"windowEntries": 2}})
    assert (await agent.run(KEY, "one")).success
    spill = agent.context_files.add_history(KEY, "some text", name="h")
    dead = _dead_pid()
    context_dir = agent.agent_context.path(KEY).parent
    files_dir = agent.context_files.folder(KEY)
    stale = [
        context_dir / f".{agent.agent_context.path(KEY).name}.{dead}.tmp",
        files_dir / f".{spill.path}.{dead}.140123456789.tmp",
    ]
    live = context_dir / f".other.jsonl.{os.getpid()}.tmp"  # ours: may be mid-rewrite, kept
    for path in [*stale, live]:
        path.write_text('{"half": "written', encoding="utf-8")

    _store._cache.clear()  # what a restarted process starts with: no index read yet
    fresh, _ = agent_for(tmp_path, context={"agentContext": {"windowEntries": 2}})
    assert (await fresh.run(KEY, "two")).success
    assert [r.id for r in fresh.context_files.list(KEY, kind="history")] == [spill.id]
    assert [p.exists() for p in stale] == [False, False]
    assert live.exists()


async def test_a_turn_missing_from_the_transcript_and_log_is_recovered_on_hydration(tmp_path: Path) -> None:
    agent, _ = agent_for(tmp_path)
    for text in ("one", "two"):
        assert (await agent.run(KEY, text)).success
    # a kill right after the message-log append of turn three: only the message log has it
    transcript_before = agent.transcript.path(KEY).read_bytes()
    context_before = agent.agent_context.path(KEY).read_bytes()
    assert (await agent.run(KEY, "three")).success
    agent.transcript.path(KEY).write_bytes(transcript_before)
    agent.agent_context.path(KEY).write_bytes(context_before)

    fresh, _model = agent_for(tmp_path)
    assert (await fresh.run(KEY, "four")).success
    transcript = read_jsonl(fresh.transcript.path(KEY))
    assert [(e["role"], e["text"], e.get("recovered", False)) for e in transcript] == [
        ("user", "one", False),
        ("assistant", "echo: one", False),
        ("user", "two", False),
        ("assistant", "echo: two", False),
        ("user", "three", True),
        ("assistant", "echo: three", True),
        ("user", "four", False),
        ("assistant", "echo: four", False),
    ]
    context = read_jsonl(fresh.agent_context.path(KEY))
    assert [(e["userPreview"], e.get("recovered", False)) for e in context] == [
        ("one", False),
        ("two", False),
        ("three", True),
        ("four", False),
    ]
    turns = [r["requestId"] for r in read_jsonl(fresh.chats.log.path(KEY)) if r["t"] == "turn"]
    assert [e["requestId"] for e in context] == turns
    assert [e["requestId"] for e in transcript[::2]] == turns
    # a second hydration finds nothing to do
    again, _ = agent_for(tmp_path)
    assert reconcile(again.chats.log, again.transcript, again.agent_context, KEY) == 0


async def test_reconcile_reads_only_the_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hydration of a long, consistent chat reads a few entries backwards, not the whole files."""
    agent, _ = agent_for(tmp_path)
    for i in range(40):
        assert (await agent.run(KEY, f"t{i}")).success
    from shipagent import jsonl

    consumed = 0
    real = jsonl.iter_objects_backward

    def counting(path: Path):  # type: ignore[no-untyped-def]
        nonlocal consumed
        for obj in real(path):
            consumed += 1
            yield obj

    monkeypatch.setattr(jsonl, "iter_objects_backward", counting)
    fresh, _ = agent_for(tmp_path)
    assert reconcile(fresh.chats.log, fresh.transcript, fresh.agent_context, KEY) == 0
    assert consumed <= 6  # newest message-log record + a couple of lines of each log
