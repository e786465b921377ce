"""JSONL stores: torn-line recovery, fresh-line appends, backward reads, agent-context windowing."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from shipagent import ShipAgent, jsonl
from tests.support.core import ScriptedModel, answer, dump, make_agent, make_project, read_jsonl, user_texts

TORN = b'{"t":"turn","requestId":"torn","messages":[{"par'


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


# -- primitives ------------------------------------------------------------------------------------


def test_append_read_round_trip_with_unicode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "log.jsonl"
    jsonl.append_line(path, {"text": "héllo 🚀\nnew line inside"})
    jsonl.append_lines(path, [{"n": 1}, {"n": 2}])
    jsonl.append_lines(path, [])  # nothing to write: no empty line
    assert path.read_bytes().count(b"\n") == 3
    assert jsonl.read_all(path) == [{"text": "héllo 🚀\nnew line inside"}, {"n": 1}, {"n": 2}]
    assert "🚀".encode() in path.read_bytes()  # UTF-8, not \\u escapes


def test_append_creates_folders_only_when_the_open_says_they_are_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Path] = []
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        made.append(self)
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", mkdir)
    path = tmp_path / "a" / "b" / "log.jsonl"
    jsonl.append_line(path, {"n": 1})  # missing folders: created on the way
    assert made[0] == tmp_path / "a" / "b" and path.is_file()
    calls = len(made)
    jsonl.append_line(path, {"n": 2})  # the common case: no mkdir (nor its stat) per append
    jsonl.append_line(tmp_path / "a" / "other.jsonl", {"n": 3})
    assert len(made) == calls
    assert jsonl.read_all(path) == [{"n": 1}, {"n": 2}]


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    assert jsonl.read_all(tmp_path / "nope.jsonl") == []
    assert jsonl.read_last(tmp_path / "nope.jsonl", 5) == []
    assert list(jsonl.iter_lines_backward(tmp_path / "nope.jsonl")) == []


@pytest.mark.parametrize("torn", [TORN, b'{"n": 3', b"\xff\xfe garbage", b'{"n": 3}garbage'])
def test_torn_last_line_is_skipped_with_a_warning(
    tmp_path: Path, torn: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log.jsonl"
    jsonl.append_lines(path, [{"n": 1}, {"n": 2}])
    with open(path, "ab") as fh:
        fh.write(torn)
    with caplog.at_level(logging.WARNING, logger="shipagent.jsonl"):
        assert jsonl.read_all(path) == [{"n": 1}, {"n": 2}]
    assert "torn last line" in caplog.text
    assert jsonl.read_last(path, 10) == [{"n": 1}, {"n": 2}]
    assert jsonl.read_last(path, 1) == [{"n": 2}]

    # The next append starts on a fresh line: the fragment stays one bad line on its own.
    jsonl.append_line(path, {"n": 3})
    lines = _lines(path)
    assert lines[-1] == b"" and lines[-2] == b'{"n":3}' and lines[-3] == torn
    assert jsonl.read_all(path) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert jsonl.read_last(path, 2) == [{"n": 2}, {"n": 3}]


def test_read_last_with_skip_and_small_blocks(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    jsonl.append_lines(path, [{"n": i, "pad": "x" * (i % 7)} for i in range(100)])
    assert [o["n"] for o in jsonl.read_last(path, 3)] == [97, 98, 99]
    assert [o["n"] for o in jsonl.read_last(path, 3, skip=2)] == [95, 96, 97]
    raw = list(jsonl.iter_lines_backward(path, block_size=7))
    assert [json.loads(r)["n"] for r in raw] == list(range(99, -1, -1))


def test_rewrite_replaces_atomically_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    jsonl.append_lines(path, [{"n": i} for i in range(5)])
    jsonl.rewrite(path, [{"n": "only"}])
    assert jsonl.read_all(path) == [{"n": "only"}]
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"]


# -- the agent's stores ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_torn_lines_in_every_store_do_not_stop_a_new_agent(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    scripted = ScriptedModel()
    agent = make_agent(root, scripted.model)
    for text in ("one", "two"):
        assert (await agent.run("chat:1", text)).success
    expected = dump(agent.history("chat:1"))

    transcript = agent.transcript.path("chat:1")
    messages = agent.chats.log.path("chat:1")
    context_log = agent.agent_context.path("chat:1")
    for path, fragment in (
        (transcript, b'{"v":1,"ts":"2026-01-01T00:00:00.000Z","chatKey":"chat:1","role":"us'),
        (messages, TORN),
        (context_log, b'{"v":1,"userPreview":"half'),
    ):
        _append_raw(path, fragment)

    # A new process (crash and restart) rebuilds the history and keeps working.
    restarted = make_agent(root, scripted.model)
    assert dump(restarted.history("chat:1")) == expected
    result = await restarted.run("chat:1", "three")
    assert result.success, result.output
    assert user_texts(scripted.requests[-1]) == ["one", "two", "three"]

    for path in (transcript, messages, context_log):
        lines = [line for line in path.read_bytes().split(b"\n") if line]
        bad = [line for line in lines if not _parses(line)]
        assert len(bad) == 1, path  # the fragment, alone on its line; the new record parses
        assert _parses(lines[-1])
    assert [e["text"] for e in jsonl.read_all(transcript)] == [
        "one",
        "echo: one",
        "two",
        "echo: two",
        "three",
        "echo: three",
    ]
    assert [e["userPreview"] for e in jsonl.read_all(context_log)] == ["one", "two", "three"]

    # And a third process still rebuilds the whole chat across the bad line.
    again = ShipAgent.from_project(root, model=scripted.model)
    assert user_texts(again.history("chat:1")) == ["one", "two", "three"]


def _append_raw(path: Path, data: bytes) -> None:
    """What a crash mid-write leaves behind: a fragment without its newline."""
    with open(path, "ab") as fh:
        fh.write(data)


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


@pytest.mark.anyio
async def test_message_log_with_only_a_torn_line_is_an_empty_history(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    agent = make_agent(root, ScriptedModel().model)
    path = agent.chats.log.path("k")
    path.parent.mkdir(parents=True)
    path.write_bytes(TORN)
    assert agent.history("k") == []
    assert (await agent.run("k", "hi")).success
    assert user_texts(make_agent(root, ScriptedModel().model).history("k")) == ["hi"]


@pytest.mark.anyio
async def test_transcript_and_agent_context_entries_have_the_seed_fields(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    agent = make_agent(root, ScriptedModel(lambda m, i, n: answer("x" * 5000)).model)
    result = await agent.run("api:chat:alice", "u" * 3000)
    transcript = read_jsonl(agent.transcript.path("api:chat:alice"))
    assert [sorted(e) for e in transcript] == [["chatKey", "requestId", "role", "text", "ts", "v"]] * 2
    assert [(e["v"], e["chatKey"], e["requestId"], e["role"]) for e in transcript] == [
        (1, "api:chat:alice", result.request_id, "user"),
        (1, "api:chat:alice", result.request_id, "assistant"),
    ]
    assert transcript[0]["ts"].endswith("Z")
    [entry] = read_jsonl(agent.agent_context.path("api:chat:alice"))
    assert sorted(entry) == sorted(
        ["v", "ts", "chatKey", "requestId", "userPreview", "outputPreview", "toolCalls"]
    )
    assert len(entry["userPreview"]) == 2000 and len(entry["outputPreview"]) == 2000
    assert entry["toolCalls"] == [] and entry["requestId"] == result.request_id
    assert agent.agent_context.path("api:chat:alice").parent == root / ".ship" / "memory" / "agent-context"


@pytest.mark.anyio
async def test_agent_context_log_is_windowed(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"context": {"agentContext": {"windowEntries": 5}}})
    agent = make_agent(root, ScriptedModel().model)
    for i in range(8):
        assert (await agent.run("k", f"run {i}")).success
    path = agent.agent_context.path("k")
    entries = read_jsonl(path)
    assert len(entries) == 5
    assert entries[0]["summary"] is True
    assert entries[0]["runs"] == 4
    assert entries[0]["userPreview"].startswith("Summary of 4 earlier runs")
    assert [e["userPreview"] for e in entries[1:]] == ["run 4", "run 5", "run 6", "run 7"]
    assert not any("summary" in e for e in entries[1:])
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file left

    # A restarted agent keeps the window (it does not trust an in-memory count it lacks).
    restarted = make_agent(root, ScriptedModel().model)
    for i in range(8, 10):
        assert (await restarted.run("k", f"run {i}")).success
    entries = read_jsonl(path)
    assert len(entries) == 5 and entries[0]["runs"] == 6
    assert [e["userPreview"] for e in entries[1:]] == ["run 6", "run 7", "run 8", "run 9"]


def test_lines_backward_at_give_each_line_its_start_offset_and_page_from_end(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    lines = [b'{"n": 1}', b"", b'{"n": 22}', b"torn", b'{"n": 333}']
    path.write_bytes(b"\n".join(lines) + b"\n")
    data = path.read_bytes()
    for block_size in (3, 7, 64 * 1024):  # lines cut across blocks, and one block for all
        found = list(jsonl.iter_lines_backward_at(path, block_size=block_size))
        assert [raw for _, raw in found] == [b'{"n": 333}', b"torn", b'{"n": 22}', b'{"n": 1}']
        assert all(data[start : start + len(raw)] == raw for start, raw in found)
        older = found[1][0]  # page: everything before the line at that offset
        assert list(jsonl.iter_lines_backward_at(path, end=older, block_size=block_size)) == found[2:]
    assert list(jsonl.iter_lines_backward_at(tmp_path / "nope.jsonl")) == []
