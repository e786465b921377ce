"""The agent-context window rewrite works on raw lines: kept entries are copied, damage is dropped.

Past ``windowEntries`` every append rewrites the file. These tests pin what that rewrite may and may not do to
the bytes on disk.
"""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import pytest

from shipagent import jsonl
from shipagent.chatkeys import ShipPaths
from shipagent.store._records import summarize_window
from shipagent.store.logs import AgentContextLog, agent_context_summary

CALL = [{"tool": "exec_shell", "success": True, "error": None}]


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_kept_entries_are_copied_byte_for_byte(tmp_path: Path) -> None:
    log = AgentContextLog(ShipPaths(tmp_path), window=5)
    path = log.path("k")
    for i in range(4):
        log.append("k", f"r{i}", f"frage {i} ünïcödé 🚢", f"answer {i}", CALL)
    # A hand-written entry in another JSON style (spaces, key order, \u escapes) is an entry too.
    hand = b'{"requestId": "hand", "userPreview": "caf\\u00e9", "v": 1, "toolCalls": [], "ts": "x"}'
    with path.open("ab") as fh:
        fh.write(hand + b"\n")
    log.forget("k")  # another writer appended: the cached count is stale
    before = _lines(path)
    assert len(before) == 5 and before[-1] == hand

    log.append("k", "r5", "six", "answer 5", CALL)  # window overflows: r0 and r1 merge
    after = _lines(path)
    assert len(after) == 5
    summary = json.loads(after[0])
    assert summary["summary"] is True and summary["runs"] == 2
    assert summary["outputPreview"] == "Tools used in those runs: exec_shell×2"
    assert after[1:4] == before[2:5]  # r2, r3 and the hand-written line: the very same bytes
    assert json.loads(after[4])["requestId"] == "r5"
    assert "ünïcödé 🚢".encode() in after[1]  # not re-encoded as \u escapes

    log.append("k", "r6", "seven", "answer 6", CALL)  # and again: the summary absorbs r2
    again = _lines(path)
    assert json.loads(again[0])["runs"] == 3
    assert again[1:4] == after[2:5]
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file left


def test_a_damaged_line_inside_the_window_never_fails_a_commit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = AgentContextLog(ShipPaths(tmp_path), window=4)
    path = log.path("k")
    log.append("k", "r0", "zero", "a0", CALL)
    log.append("k", "r1", "one", "a1", CALL)
    with path.open("ab") as fh:
        fh.write(b'{"v":1,"requestId":"bad", not json}\n')  # looks like an entry, does not parse
        fh.write(b"[1, 2]\n")  # JSON, but not an entry
        fh.write(b'{"v":1,"ts":"2026-')  # torn by a crash mid-append: no brace, no newline

    # A fresh process (no cached count) counts the lines that may be entries without parsing
    # them: the torn and the bracket lines are not counted, the damaged-but-braced one is.
    restarted = AgentContextLog(ShipPaths(tmp_path), window=4)
    restarted.append("k", "r2", "two", "a2", CALL)  # 4 entries: no rewrite yet
    assert len(_lines(path)) == 6
    restarted.append("k", "r3", "three", "a3", CALL)  # overflows: r0 and r1 merge, junk is dropped
    lines = _lines(path)
    assert len(lines) == 4
    assert json.loads(lines[0])["runs"] == 2
    assert lines[1] == b'{"v":1,"requestId":"bad", not json}'  # kept as it was, unread
    assert [r["requestId"] for r in restarted.last("k", 10)] == ["r1", "r2", "r3"]  # readers skip it

    with caplog.at_level(logging.WARNING, logger="shipagent.window"):
        restarted.append("k", "r4", "four", "a4", CALL)  # merges the summary and the damaged line
    lines = _lines(path)
    summary = json.loads(lines[0])
    assert summary["runs"] == 2 and summary["requestId"] == "r1"  # the damaged line counted no run
    assert [json.loads(x)["requestId"] for x in lines[1:]] == ["r2", "r3", "r4"]
    assert f"{path}: dropping an unreadable line" in caplog.text


def test_a_window_of_only_damaged_older_lines_writes_no_summary(tmp_path: Path) -> None:
    log = AgentContextLog(ShipPaths(tmp_path), window=3)
    path = log.path("k")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"{broken}\n{also broken}\n{\xff}\n")  # three "entries", none parses
    log.append("k", "r0", "zero", "a0", [])
    lines = _lines(path)
    assert lines[:-1] == [b"{\xff}"]  # the two oldest merged into nothing: no summary entry
    assert json.loads(lines[-1])["requestId"] == "r0"


def test_file_and_database_stores_write_the_same_summary() -> None:
    entries = [
        {"v": 1, "ts": f"t{i}", "chatKey": "k", "requestId": f"r{i}", "runs": i + 1, "toolCalls": CALL}
        for i in range(5)
    ]
    windowed = summarize_window("k", entries, 3)
    assert windowed[1:] == entries[3:]
    assert windowed[0] == agent_context_summary("k", entries[:3])
    assert (
        windowed[0]["runs"] == 6 and windowed[0]["userPreview"] == "Summary of 6 earlier runs (from t0 to t2)"
    )
    assert summarize_window("k", entries[:2], 3) == entries[:2]


def test_a_file_shorter_than_counted_is_rewritten_line_by_line(tmp_path: Path) -> None:
    log = AgentContextLog(ShipPaths(tmp_path), window=3)
    path = log.path("k")
    for i in range(3):
        log.append("k", f"r{i}", f"q{i}", f"a{i}", CALL)
    first = _lines(path)[0]
    path.write_bytes(first + b"\n")  # cut behind the log's back, with no forget()
    log.append("k", "r3", "q3", "a3", CALL)  # the cached count (3) says full: it is not
    assert [json.loads(x)["requestId"] for x in _lines(path)] == ["r0", "r3"]


def test_a_write_that_failed_halfway_is_recounted_and_its_torn_line_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = AgentContextLog(ShipPaths(tmp_path), window=3)
    path = log.path("k")
    log.append("k", "r0", "q0", "a0", CALL)
    real = jsonl.append_raw

    def disk_full(target: Path, data: bytes) -> None:
        real(target, data[: len(data) // 2].rstrip(b"\n"))  # half a line reached the disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonl, "append_raw", disk_full)
    with pytest.raises(OSError, match="No space"):
        log.append("k", "r1", "q1", "a1", CALL)
    monkeypatch.setattr(jsonl, "append_raw", real)
    for i in range(2, 5):
        log.append("k", f"r{i}", f"q{i}", f"a{i}", CALL)
    lines = _lines(path)
    assert len(lines) == 3  # summary + the newest two; the torn half line is gone
    assert json.loads(lines[0])["runs"] == 2  # r0 and r2 (r1 never was written)
    assert [json.loads(x)["requestId"] for x in lines[1:]] == ["r3", "r4"]


def test_a_foreign_append_at_a_full_window_is_merged_by_the_next_rewrite(tmp_path: Path) -> None:
    """Another process appended behind this one's count: the rewrite re-reads the lines."""
    log = AgentContextLog(ShipPaths(tmp_path), window=3)
    for n in range(3):
        log.append("k", f"a{n}", f"u{n}", f"o{n}", [])
    other = AgentContextLog(ShipPaths(tmp_path), window=3)  # stands in for a second process
    other.append("k", "x0", "u", "o", [])  # it counts 3 and rewrites: summary + 2 kept + x0
    jsonl.append_line(log.path("k"), {"v": 1, "requestId": "x1"})
    log.append("k", "b0", "u", "o", [])  # this one still counts 3 entries
    entries = [json.loads(line) for line in _lines(log.path("k"))]
    assert len(entries) == 3
    assert [e["requestId"] for e in entries[1:]] == ["x1", "b0"]
    assert entries[0]["summary"] is True and entries[0]["runs"] == 4  # a0 a1 a2 x0, none lost
